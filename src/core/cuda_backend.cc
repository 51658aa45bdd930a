// The CUDA backend's op adapters: the op methods Backend still has (core/backend.h: dense
// algebra and reductions) on the GPU, with
// the semantics of the CPU reference (cpu_backend.cc) computed by the kernels of kernels/ (host
// launchers declared in kernels/*.cuh). The device runtime it runs on (device, stream, memory,
// copies, scratch and caches) is core/cuda_runtime.h; this file only maps ops to kernels.
//
// Execution model. Everything is enqueued on the runtime's one stream, so consecutive ops are
// ordered by the stream alone and calls return without waiting, except host<->device copies,
// ops that return a number (dot, sum_squares: the fp64 result goes through pinned memory, then
// the stream is synchronized) and synchronize(). NcclCommunicator is given this stream when it
// is built (Backend::cuda(); see src/parallel/nccl_communicator.h).
//
// Dtypes. Activations are f32 or bf16. When all activation arguments of a call share one dtype
// the f32 or bf16 kernel runs directly; a call mixing f32 and bf16 activations (which the CPU
// backend accepts) widens its bf16 arguments into fp32 temporaries, runs the fp32 kernel and
// rounds the outputs back to bf16: exactly what the CPU backend does (fp32 math on widened
// inputs, one rounding of each bf16 output). rstd, lse, gates, cross-entropy statistics,
// parameters, gradients and optimizer states are f32.
//
// Differences from the CPU backend that tests must allow for (here and in the CUDA side of every
// op family, core/ops/*.cc): summation orders (block
// reductions instead of sequential loops; row sums in fp32 where the CPU uses fp64 in
// xent_partial, rmsnorm and gated_mix_backward's gate gradient), cuBLASLt instead of OpenBLAS,
// and fused multiply-adds chosen by nvcc. Every op is deterministic run to run (no atomics:
// embedding_backward adds repeated ids in id order, like the CPU).
//
// Threads. Ops may be called from any host thread (the runtime makes its device current on the
// calling thread first); calls from several threads are all ordered by the one stream. A Tensor
// must not outlive the backend that allocated it.
#if VTRAIN_HAS_CUDA

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/backend.h"
#include "core/ops.h"
#include "core/check.h"
#include "core/process_device.h"
#include "kernels/cast.cuh"
#include "core/cuda_backend.h"
#include "kernels/cuda_check.cuh"
#include "kernels/elementwise.cuh"
#include "core/cuda_gemm.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/reduce.cuh"
#include "kernels/value_mix.cuh"

namespace vt {

namespace {

using namespace cuda_acts;

class CudaBackend final : public Backend {
 public:
  CudaBackend() : stream_(rt_.stream()) {}
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  CudaRuntime* cuda() override { return &rt_; }

  // The runtime calls (core/cuda_runtime.h).
  void* alloc(size_t bytes) override { return rt_.allocate(bytes, true); }
  // No fill: for tensors written in full before they are read (Tensor::empty: copies, casts).
  void* alloc_uninitialized(size_t bytes) override { return rt_.allocate(bytes, false); }
  void release(void* p) override { rt_.release(p); }
  void fill_zero(void* p, size_t bytes) override { rt_.fill_zero(p, bytes); }
  void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    rt_.copy_bytes(dst, src, bytes, kind);
  }
  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               size_t rows) override {
    rt_.copy_2d(dst, dpitch, src, spitch, width, rows);
  }
  void synchronize() override { rt_.synchronize(); }
  size_t bytes_in_use() const override { return rt_.bytes_in_use(); }
  size_t peak_bytes() const override { return rt_.peak_bytes(); }
  void reset_peak() override { rt_.reset_peak(); }
  int64_t available_bytes() const override { return rt_.available_bytes(); }

  // ---------------------------------------------------------------------------------------------
  // Dense algebra

  void gemm(const GemmArgs& g) override {
    on_device();
    const DType ta = g.A.dtype(), tb = g.B.dtype(), tc = g.C.dtype();
    VT_CHECK_MSG(ta == tb, "gemm: A and B must have one dtype");
    VT_CHECK_MSG((ta == DType::kF32 && tc == DType::kF32) ||
                     (ta == DType::kBF16 && (tc == DType::kBF16 || tc == DType::kF32)),
                 "gemm: supported dtypes are f32 x f32 -> f32 and bf16 x bf16 -> bf16 or f32, got "
                     << dtype_name(ta) << " x " << dtype_name(tb) << " -> " << dtype_name(tc));
    if (g.M == 0 || g.N == 0) return;
    if (g.K == 0) {  // C = beta * C (cuBLASLt is not asked to handle K = 0)
      if (tc == DType::kF32)
        cuda::scale_matrix(f32p(g.C), g.M, g.N, g.ldc, g.beta, stream_);
      else
        cuda::scale_matrix(bf16p(g.C), g.M, g.N, g.ldc, g.beta, stream_);
      return;
    }
    cuda::Gemm& mm = rt_.gemm();
    if (ta == DType::kF32) {
      mm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, f32p(g.A), g.lda, f32p(g.B), g.ldb, g.beta,
         f32p(g.C), g.ldc, stream_);
    } else if (tc == DType::kBF16) {
      mm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, bf16p(g.A), g.lda, bf16p(g.B), g.ldb,
         g.beta, bf16p(g.C), g.ldc, stream_);
    } else {
      mm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, bf16p(g.A), g.lda, bf16p(g.B), g.ldb,
         g.beta, f32p(g.C), g.ldc, stream_);
    }
  }

  void cast(const Tensor& y, const Tensor& x) override {
    on_device();
    VT_CHECK(y.numel() == x.numel());
    if (x.numel() == 0) return;
    if (y.dtype() == x.dtype()) {
      if (y.raw() != x.raw())
        VT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice,
                                      stream_));
    } else if (x.dtype() == DType::kF32 && y.dtype() == DType::kBF16) {
      cuda::cast_f32_to_bf16(f32p(x), bf16p(y), x.numel(), stream_);
    } else if (x.dtype() == DType::kBF16 && y.dtype() == DType::kF32) {
      cuda::cast_bf16_to_f32(bf16p(x), f32p(y), x.numel(), stream_);
    } else {
      VT_CHECK_MSG(false, "cuda: no conversion " << dtype_name(x.dtype()) << " -> "
                                                 << dtype_name(y.dtype()));
    }
  }

  void axpy(const Tensor& y, const Tensor& x, float alpha) override {
    on_device();
    const int64_t n = y.numel();
    on_acts(stream_, [&](auto yp, auto xp) { cuda::value_axpy(alpha, xp, yp, n, stream_); },
            inout(y), in(x));
  }

  // y = alpha * x is value_mix2 with no second source; y may alias x (elementwise).
  void scale_copy(const Tensor& y, const Tensor& x, float alpha) override {
    on_device();
    const int64_t n = y.numel();
    on_acts(
        stream_,
        [&](auto yp, auto xp) {
          using E = std::remove_pointer_t<decltype(xp)>;
          cuda::value_mix2(alpha, xp, 0.0f, static_cast<const E*>(nullptr), yp, n, stream_);
        },
        out(y), in(x));
  }

  double dot(const Tensor& a, const Tensor& b) override {
    on_device();
    VT_CHECK(a.numel() == b.numel());
    std::lock_guard<std::mutex> lock(rt_.scratch_mutex());
    double* partials = rt_.reduction_partials();
    double* out = rt_.reduction_result();
    const int64_t n = a.numel();
    on_acts(stream_, [&](auto ap, auto bp) { cuda::dot(ap, bp, n, partials, out, false, stream_); },
            in(a), in(b));
    return rt_.fetch_result(out);
  }

  double sum_squares(const Tensor& x) override {
    on_device();
    need_float(x);
    std::lock_guard<std::mutex> lock(rt_.scratch_mutex());
    double* partials = rt_.reduction_partials();
    double* out = rt_.reduction_result();
    if (x.dtype() == DType::kF32)
      cuda::sum_squares(f32p(x), x.numel(), partials, out, false, stream_);
    else
      cuda::sum_squares(bf16p(x), x.numel(), partials, out, false, stream_);
    return rt_.fetch_result(out);
  }

  void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef,
                       int64_t index) override {
    on_device();
    const float* c = f32_of(coef) + index;
    VT_CHECK_MSG(x.dtype() == y.dtype(), "scale_copy_coef: x and y must share a dtype");
    on_acts(stream_, [&](auto yp, auto xp) { cuda::scale_copy_coef(xp, yp, x.numel(), c, stream_); },
            out(y), in(x));
  }

  void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) override {
    on_device();
    const float* c = f32_of(coef) + index;
    VT_CHECK_MSG(x.dtype() == y.dtype(), "axpy_coef: x and y must share a dtype");
    on_acts(stream_, [&](auto yp, auto xp) { cuda::axpy_coef(xp, yp, x.numel(), c, stream_); },
            inout(y), in(x));
  }

  // The fp64 result goes through the shared reduction scratch (stream-ordered, so the next
  // reduction may reuse it) into the fp32 element.
  void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index) override {
    on_device();
    float* dst = f32_of(out) + index;
    const int64_t n = a.numel();
    std::lock_guard<std::mutex> lock(rt_.scratch_mutex());
    double* partials = rt_.reduction_partials();
    double* res = rt_.reduction_result();
    if (n == 0) {
      VT_CUDA_CHECK(cudaMemsetAsync(dst, 0, sizeof(float), stream_));
      return;
    }
    on_acts(stream_, [&](auto ap, auto bp) { cuda::dot(ap, bp, n, partials, res, false, stream_); },
            in(a), in(b));
    cuda::double_to_float(res, dst, stream_);
  }

  void normalize_frobenius(const Tensor& x, double scale, double eps) override {
    on_device();
    need_float(x);
    std::lock_guard<std::mutex> lock(rt_.scratch_mutex());
    double* partials = rt_.reduction_partials();
    double* res = rt_.reduction_result();
    if (x.dtype() == DType::kF32) {
      cuda::sum_squares(f32p(x), x.numel(), partials, res, false, stream_);
      cuda::div_by_norm(f32p(x), x.numel(), res, scale, eps, stream_);
    } else {
      cuda::sum_squares(bf16p(x), x.numel(), partials, res, false, stream_);
      cuda::div_by_norm(bf16p(x), x.numel(), res, scale, eps, stream_);
    }
  }

  double sum_squares_list(const std::vector<Tensor>& xs) override {
    on_device();
    std::lock_guard<std::mutex> lock(rt_.scratch_mutex());
    double* partials = rt_.reduction_partials();
    double* out = rt_.reduction_result();
    bool first = true;
    for (const Tensor& x : xs) {
      need_float(x);
      if (x.numel() == 0) continue;
      if (x.dtype() == DType::kF32)
        cuda::sum_squares(f32p(x), x.numel(), partials, out, !first, stream_);
      else
        cuda::sum_squares(bf16p(x), x.numel(), partials, out, !first, stream_);
      first = false;
    }
    if (first) return 0.0;
    return rt_.fetch_result(out);
  }

  void add_scalar(const Tensor& t, int64_t index, double value) override {
    on_device();
    VT_CHECK(index >= 0 && index < t.numel());
    cuda::add_scalar(f32_of(t), index, static_cast<float>(value), stream_);
  }

  void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols) override {
    on_device();
    VT_CHECK_MSG(y.dtype() == x.dtype(), "transpose: dtypes differ");
    VT_CHECK(x.numel() == rows * cols && y.numel() == rows * cols);
    switch (x.dtype()) {
      case DType::kF32: cuda::transpose(f32p(x), f32p(y), rows, cols, stream_); break;
      case DType::kBF16: cuda::transpose(bf16p(x), bf16p(y), rows, cols, stream_); break;
      case DType::kI32:
        cuda::transpose(static_cast<const int32_t*>(x.raw()), static_cast<int32_t*>(y.raw()),
                        rows, cols, stream_);
        break;
    }
  }

 private:
  void on_device() const { rt_.on_device(); }

  CudaRuntime rt_;
  const cudaStream_t stream_;  // rt_'s stream, which every op is queued on
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

cudaStream_t cuda_compute_stream(Backend& b) {
  CudaRuntime* rt = b.cuda();
  return rt ? rt->stream() : nullptr;
}

std::unique_ptr<op_profile::DeviceClock> make_cuda_profile_clock(Backend& b) {
  const cudaStream_t s = cuda_compute_stream(b);
  return s ? make_cuda_event_clock(s) : nullptr;
}

}  // namespace vt

#endif  // VTRAIN_HAS_CUDA
