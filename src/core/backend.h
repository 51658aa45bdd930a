// Backend: the interface every compute device implements, mostly its runtime: memory, copies,
// synchronization, accounting, and (CUDA) the device runtime behind it (cuda(): stream, scratch,
// caches; core/cuda_runtime.h). Tensors carry a Device; ops dispatch to the backend registered
// for that device. The op families of core/ops/*.cc compute on the host when cuda() is null and
// launch their kernels on the CUDA runtime otherwise, so they need no method here.
// The CPU backend (cpu_backend.cc) is the reference; the CUDA backend (cuda_backend.cc, built
// when nvcc is found) runs the kernels of kernels/; the device emulator (also cpu_backend.cc)
// registers itself for Device::kCUDA so that the whole GPU code path (device memory that host
// code may not touch, explicit copies, bf16 activations) runs and is tested on machines without
// a GPU.
//
// Conventions: all pointers passed to one call belong to the backend's device (host memory for
// the CPU backend and the device emulator).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace vt {

class CudaRuntime;  // core/cuda_runtime.h (builds with CUDA)

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// Named here for headers that reach them through backend.h (the op families define them).
struct XentArgs;  // core/ops/xent.h
struct GemmArgs;  // core/ops/gemm.h

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
// Whether the usable CUDA devices are vtrain's CUDA emulation (cuda_emu/: the GPU code path on the
// CPU), not GPUs: told by the name the emulation gives its devices, as a program would see a
// GPU's name (no build switch in product code). False without any CUDA device.
bool cuda_devices_are_emulated();
// The current CUDA device's compute capability as major * 10 + minor (90: Hopper; FP8 tensor
// cores from 89); 0 without a CUDA device.
int cuda_compute_capability();
// The environment variable that allows `--device cuda` on the CUDA emulation (its value "1"):
// without it the emulation is refused there, as it is thousands of times slower than a GPU and a
// script asking for a GPU must not silently get it. The test suite and the GPU window's
// rehearsal set it (docs/usage.md "GPUs").
inline constexpr const char* kAllowEmulatedCudaEnv = "VTRAIN_ALLOW_EMULATED_CUDA";

}  // namespace vt
