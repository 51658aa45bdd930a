// Backend: the interface every compute device implements, mostly its runtime: memory, copies,
// synchronization, accounting, and (CUDA) the device runtime behind it (cuda(): stream, scratch,
// caches; core/cuda_runtime.h). Tensors carry a Device; ops dispatch to the backend registered
// for that device. The op families of core/ops/*.cc compute on the host when cuda() is null and
// launch their kernels on the CUDA runtime otherwise, so they need no method here; the dense
// algebra and reductions below are the ops that still have entry points.
// The CPU backend (cpu_backend.cc) is the reference; the CUDA backend (cuda_backend.cc, built
// when nvcc is found) runs the kernels of kernels/; the device emulator (also cpu_backend.cc)
// registers itself for Device::kCUDA so that the whole GPU code path (device memory that host
// code may not touch, explicit copies, bf16 activations) runs and is tested on machines without
// a GPU.
//
// Conventions: all tensors passed to one call live on the backend's device; shapes were checked
// by ops.cc. Ops that return a number (dot, sum_squares) synchronize with the device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace vt {

class CudaRuntime;  // core/cuda_runtime.h (builds with CUDA)

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// C(M,N) = alpha * op(A) * op(B) + beta * C, row-major, leading dimensions in elements (the
// semantics of vt::cpu::gemm). A, B, C are base tensors (their data pointers plus *_offset
// elements); dtypes: all f32, or A and B bf16 with C bf16 or f32 (fp32 accumulation).
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  Tensor A, B, C;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

struct XentArgs;  // core/ops/xent.h (named here for headers that reach it through backend.h)

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory (bytes). alloc returns zero-filled memory aligned to at least 64 bytes;
  // alloc_uninitialized the same without the fill, for memory written in full before it is read
  // (Tensor::empty). A backend without a cheaper way falls back to alloc.
  virtual void* alloc(size_t bytes) = 0;
  virtual void* alloc_uninitialized(size_t bytes) { return alloc(bytes); }
  virtual void release(void* p) = 0;
  virtual void fill_zero(void* p, size_t bytes) = 0;
  virtual void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  // Device-to-device strided copy: `rows` rows of `width` bytes from src (row pitch spitch) to
  // dst (row pitch dpitch).
  virtual void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                       size_t rows) = 0;
  // Waits until every queued operation has finished.
  virtual void synchronize() = 0;
  // Bytes currently allocated through alloc() and the most ever at once.
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
  // Bytes the device can still allocate (-1: unknown, e.g. host memory: see host_memory.h).
  virtual int64_t available_bytes() const { return -1; }
  // The CUDA device runtime this backend runs on (stream, scratch, caches: core/cuda_runtime.h),
  // or nullptr for the backends that compute on the host (CPU, device emulator).
  virtual CudaRuntime* cuda() { return nullptr; }

  // Dense algebra.
  virtual void gemm(const GemmArgs& g) = 0;
  // y = x converted to y's dtype (f32 <-> bf16, or a plain copy for equal dtypes).
  virtual void cast(const Tensor& y, const Tensor& x) = 0;
  virtual void axpy(const Tensor& y, const Tensor& x, float alpha) = 0;        // y += alpha x
  virtual void scale_copy(const Tensor& y, const Tensor& x, float alpha) = 0;  // y = alpha x
  virtual double dot(const Tensor& a, const Tensor& b) = 0;                   // fp64 sum
  virtual double sum_squares(const Tensor& x) = 0;                            // fp64 sum
  // sum over tensors of sum_squares(x), combined in list order (one synchronization on a GPU
  // instead of one per tensor).
  virtual double sum_squares_list(const std::vector<Tensor>& xs) {
    double s = 0.0;
    for (const Tensor& x : xs) s += x.numel() ? sum_squares(x) : 0.0;
    return s;
  }
  // t.flat[index] += value (f32 tensors): scalar-parameter gradients without a host copy.
  virtual void add_scalar(const Tensor& t, int64_t index, double value) = 0;
  // Device-side coefficients (no host round trip; coef is an f32 tensor on this device):
  // y = coef[index] * x, y += coef[index] * x.
  virtual void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef,
                               int64_t index) = 0;
  virtual void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) = 0;
  // out.flat[index] = float(sum(a * b)) accumulated in fp64, left on the device.
  virtual void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index) = 0;
  // x = x / (sqrt(sum(x^2)) * scale + eps), the norm computed and applied on the device
  // (Newton-Schulz's normalization; the division in double, rounded once).
  virtual void normalize_frobenius(const Tensor& x, double scale, double eps) = 0;
  // y (cols, rows) = x (rows, cols)^T.
  virtual void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols) = 0;
};

// The backend for a device; VT_CHECK-fails with an actionable message when none is registered.
Backend& backend(Device d);
bool has_backend(Device d);
// Registers (or, with nullptr, removes) the backend of Device::kCUDA: the CUDA backend or the
// device emulator. Not thread-safe; done once at start-up.
void set_device_backend(std::unique_ptr<Backend> b);

// The device emulator: host memory tagged Device::kCUDA, every op computed by the CPU kernels.
std::unique_ptr<Backend> make_device_emulator();
// The CUDA backend for the current device (nullptr when built without CUDA).
std::unique_ptr<Backend> make_cuda_backend();
// Number of usable CUDA devices (0 when built without CUDA or when there is none).
int cuda_device_count_or_zero();
// One line per usable CUDA device: index, name, memory, compute capability (`vtrain devices`).
// The CUDA emulation names its devices as emulated.
std::vector<std::string> cuda_device_descriptions();

}  // namespace vt
