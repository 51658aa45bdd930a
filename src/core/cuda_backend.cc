// The CUDA backend: every Backend method (core/backend.h) on the GPU, with the semantics of the
// CPU reference (cpu_backend.cc) computed by the kernels of kernels/ (host launchers declared in
// kernels/*.cuh; this file is host C++ compiled into vtrain_lib, which links vtrain_cuda).
//
// Execution model. The backend owns one non-default CUDA stream and enqueues everything on it:
// kernels, cuBLASLt GEMMs, copies, memsets, stream-ordered allocations and frees. Consecutive
// ops are therefore ordered by the stream alone and calls return without waiting, except:
//   - copy_bytes host<->device (synchronizes, so the host buffer may be reused or freed as soon
//     as the call returns, and device-to-host data is there when it returns),
//   - dot / sum_squares (return a number: the fp64 result is copied to pinned host memory, then
//     the stream is synchronized),
//   - synchronize().
// The stream is created as a *blocking* stream (cudaStreamDefault flags): work issued on the
// legacy default stream (plain cudaMemcpy, libraries that use stream 0) is still ordered with it,
// which keeps code outside this backend that touches tensor memory directly safe.
// NcclCommunicator orders its collectives with this stream through cuda_backend_stream()
// (core/cuda_backend.h; see src/parallel/nccl_communicator.cc).
//
// Memory. alloc() is cudaMallocAsync + cudaMemsetAsync(0) on the stream (zeroed, from the
// device's default memory pool, whose release threshold is raised so freed blocks stay cached
// instead of going back to the driver at every synchronization); alloc_uninitialized() (behind
// Tensor::empty: copies and casts that write every element) skips the memset. release() is
// cudaFreeAsync on the stream, so memory is recycled only after every op queued before the
// release has run.
// bytes_in_use/peak_bytes count what alloc() handed out (64-byte rounded, like the CPU backend),
// not the backend's own scratch (cuBLASLt workspace, attention-backward workspace, reduction
// scratch, RoPE cos/sin tables, fp32 temporaries of mixed-dtype calls).
//
// Dtypes. Activations are f32 or bf16. When all activation arguments of a call share one dtype
// the f32 or bf16 kernel runs directly; a call mixing f32 and bf16 activations (which the CPU
// backend accepts) widens its bf16 arguments into fp32 temporaries, runs the fp32 kernel and
// rounds the outputs back to bf16: exactly what the CPU backend does (fp32 math on widened
// inputs, one rounding of each bf16 output). rstd, lse, gates, cross-entropy statistics,
// parameters, gradients and optimizer states are f32.
//
// Attention. bf16 attention runs on the flash kernels on tensor cores (kernels/attention_tc.cuh)
// wherever they apply (head dim 32/64/128, 16-byte aligned tensors); f32, mixed-dtype and other
// head dims run the reference kernels (kernels/attention.cuh), and so does everything after
// set_cuda_attention_kernels(kReference) or VTRAIN_CUDA_ATTENTION=reference (core/cuda_backend.h).
//
// Differences from the CPU backend that tests must allow for: summation orders (block
// reductions instead of sequential loops; row sums in fp32 where the CPU uses fp64 in
// xent_partial, rmsnorm and gated_mix_backward's gate gradient), cuBLASLt instead of OpenBLAS,
// and fused multiply-adds chosen by nvcc. Every op is deterministic run to run (no atomics:
// embedding_backward adds repeated ids in id order, like the CPU).
//
// Threads. Ops may be called from any host thread (each call makes the backend's device current
// on the calling thread first); calls from several threads are all ordered by the one stream,
// allocation bookkeeping, the reduction result and the attention workspace are guarded by
// mutexes. A Tensor must not outlive the backend that allocated it.
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
#include "kernels/activation.cuh"
#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "kernels/attention_mix.cuh"
#include "kernels/attention_tc.cuh"
#include "kernels/cast.cuh"
#include "core/cuda_backend.h"
#include "kernels/cuda_check.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "core/cuda_gemm.h"
#include "kernels/optim_update.cuh"
#include "kernels/reduce.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/value_mix.cuh"
#include "kernels/xent.cuh"

namespace vt {

namespace {

using bf16 = __nv_bfloat16;

float* f32p(const Tensor& t) { return static_cast<float*>(t.raw()); }
bf16* bf16p(const Tensor& t) { return static_cast<bf16*>(t.raw()); }

float* f32_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32,
               "cuda backend: expected an f32 tensor, got " << dtype_name(t.dtype()));
  return f32p(t);
}
const int32_t* ids_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kI32, "cuda backend: ids must be i32");
  return static_cast<const int32_t*>(t.raw());
}
void need_float(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
               "cuda backend: expected an f32 or bf16 tensor, got " << dtype_name(t.dtype()));
}

// The common dtype of a call's activation arguments, or kMixed.
enum class Mix { kF32, kBF16, kMixed };
Mix mix_of(std::initializer_list<const Tensor*> ts) {
  bool all_f32 = true, all_bf16 = true;
  for (const Tensor* t : ts) {
    need_float(*t);
    all_f32 = all_f32 && t->dtype() == DType::kF32;
    all_bf16 = all_bf16 && t->dtype() == DType::kBF16;
  }
  return all_f32 ? Mix::kF32 : (all_bf16 ? Mix::kBF16 : Mix::kMixed);
}

// The device each backend op runs on is made current on the calling thread once per thread
// (cudaSetDevice is per host thread). Only this backend and NcclCommunicator set the device,
// and both pick the same one, so the cached value stays true.
thread_local int tl_current_device = -1;

// CudaAttentionKernels (core/cuda_backend.h): -1 until read from VTRAIN_CUDA_ATTENTION.
std::atomic<int> g_attention_kernels{-1};

CudaAttentionKernels attention_kernels_now() {
  int k = g_attention_kernels.load();
  if (k < 0) {
    const char* env = std::getenv("VTRAIN_CUDA_ATTENTION");
    k = int(CudaAttentionKernels::kTensorCores);
    if (env && std::strcmp(env, "reference") == 0) {
      k = int(CudaAttentionKernels::kReference);
    } else {
      VT_CHECK_MSG(!env || !*env || std::strcmp(env, "tensor-cores") == 0,
                   "VTRAIN_CUDA_ATTENTION must be 'reference' or 'tensor-cores', got '" << env
                                                                                       << "'");
    }
    g_attention_kernels = k;
  }
  return CudaAttentionKernels(k);
}

// Whether an attention call runs on the tensor-core kernels: every tensor bf16 and 16-byte
// aligned, a head dim they handle, and not switched to the reference kernels.
bool use_tensor_core_attention(const cuda::AttnShape& s, std::initializer_list<const Tensor*> ts) {
  if (attention_kernels_now() != CudaAttentionKernels::kTensorCores) return false;
  if (!cuda::attention_tc_supported(s)) return false;
  for (const Tensor* t : ts)
    if (t->dtype() != DType::kBF16 || reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0)
      return false;
  return true;
}

// An fp32 device view of an f32 or bf16 tensor for the mixed-dtype path: the tensor's own memory
// when it is f32; for bf16, a stream-ordered fp32 temporary, widened from the tensor when
// `reads`, rounded back into it (round to nearest even) when `writes` and the view closes.
class F32View {
 public:
  F32View(const Tensor& t, bool reads, bool writes, cudaStream_t s)
      : t_(t), writes_(writes), s_(s) {
    need_float(t);
    if (t.dtype() == DType::kF32) {
      p_ = f32p(t);
      return;
    }
    owned_ = true;
    const size_t bytes = std::max<size_t>(sizeof(float), sizeof(float) * size_t(t.numel()));
    VT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, s_));
    if (reads) cuda::cast_bf16_to_f32(bf16p(t), p_, t.numel(), s_);
  }
  ~F32View() {
    if (!owned_) return;
    if (writes_) cuda::cast_f32_to_bf16(p_, bf16p(t_), t_.numel(), s_);
    VT_CUDA_CHECK(cudaFreeAsync(p_, s_));
  }
  F32View(const F32View&) = delete;
  F32View& operator=(const F32View&) = delete;
  float* p() const { return p_; }

 private:
  Tensor t_;
  bool writes_;
  cudaStream_t s_;
  bool owned_ = false;
  float* p_ = nullptr;
};

// One process per GPU (core/process_device.h, the rule NcclCommunicator follows too).
int select_device() {
  const int count = cuda::cuda_device_count();
  VT_CHECK_MSG(count > 0,
               "the CUDA backend needs a CUDA device, and none is usable (no GPU or no driver); "
               "run with --device cpu, or --device emulated for the device emulator");
  return process_device_index(count);
}

// An activation argument of a backend call and how its kernel uses it.
struct Act {
  const Tensor& t;
  bool reads, writes;
};
Act in(const Tensor& t) { return {t, true, false}; }
Act out(const Tensor& t) { return {t, false, true}; }
Act inout(const Tensor& t) { return {t, true, true}; }
// Written, and read first when the kernel accumulates into it.
Act acc(const Tensor& t, bool accumulate) { return {t, accumulate, true}; }

// The f32/bf16 dispatch of every activation op: calls f with one device pointer per argument,
// all of one element type: float* when every argument is f32, bf16* when every one is bf16, and
// fp32 temporaries for a call that mixes them (F32View: widened where read, rounded back where
// written), which is what the CPU backend computes.
template <class F, class... A>
void on_acts(cudaStream_t s, F&& f, const A&... acts) {
  switch (mix_of({&acts.t...})) {
    case Mix::kF32: f(f32p(acts.t)...); return;
    case Mix::kBF16: f(bf16p(acts.t)...); return;
    case Mix::kMixed: {
      F32View views[] = {F32View(acts.t, acts.reads, acts.writes, s)...};
      [&]<size_t... I>(std::index_sequence<I...>) { f(views[I].p()...); }(
          std::index_sequence_for<A...>{});
    }
  }
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    device_ = select_device();
    VT_CUDA_CHECK(cudaSetDevice(device_));
    tl_current_device = device_;
    int pools = 0;
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
    VT_CHECK_MSG(pools != 0, "the CUDA backend needs stream-ordered allocation (memory pools), "
                             "which device " << device_ << " does not support");
    VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
    // Keep freed blocks in the pool (the default threshold 0 returns them to the driver at
    // every synchronization, making the next cudaMallocAsync an expensive driver call).
    cudaMemPool_t pool = nullptr;
    VT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    VT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    gemm_ = std::make_unique<cuda::Gemm>();
    VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&reduce_scratch_),
                             sizeof(double) * (cuda::kReduceBlocks + 1)));
    VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&reduce_host_), sizeof(double)));
  }

  // May run from a static destructor at exit, after the CUDA runtime has started to unload:
  // errors are ignored here.
  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (attn_ws_) cudaFreeAsync(attn_ws_, stream_);
    for (auto& [key, t] : rope_tables_) cudaFreeAsync(t.p, stream_);
    cudaStreamSynchronize(stream_);
    gemm_.reset();
    cudaFree(reduce_scratch_);
    cudaFreeHost(reduce_host_);
    cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const { return stream_; }

  // ---------------------------------------------------------------------------------------------
  // Memory

  void* alloc(size_t bytes) override { return allocate(bytes, true); }
  // No fill: for tensors written in full before they are read (Tensor::empty: copies, casts).
  void* alloc_uninitialized(size_t bytes) override { return allocate(bytes, false); }

  void* allocate(size_t bytes, bool zero) {
    on_device();
    const size_t a = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, a, stream_);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      VT_CHECK_MSG(false, "cuda: out of device memory allocating "
                              << bytes << " bytes (" << bytes_in_use()
                              << " bytes in use by tensors, device " << free_b << " free of "
                              << total_b << ")");
    }
    VT_CUDA_CHECK(err);
    VT_CHECK_MSG(reinterpret_cast<uintptr_t>(p) % 64 == 0, "cuda: allocation not 64-byte aligned");
    if (zero) VT_CUDA_CHECK(cudaMemsetAsync(p, 0, a, stream_));
    std::lock_guard<std::mutex> lock(mem_mu_);
    sizes_[p] = a;
    in_use_ += a;
    peak_ = std::max(peak_, in_use_);
    return p;
  }

  int64_t available_bytes() const override {
    on_device();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return static_cast<int64_t>(free_b);
  }

  void release(void* p) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mem_mu_);
      auto it = sizes_.find(p);
      VT_CHECK_MSG(it != sizes_.end(), "cuda: release of memory this backend did not allocate");
      in_use_ -= it->second;
      sizes_.erase(it);
    }
    on_device();
    // Stream-ordered: the block is reused only after everything queued before this point.
    const cudaError_t err = cudaFreeAsync(p, stream_);
    if (err != cudaErrorCudartUnloading) VT_CUDA_CHECK(err);
  }

  void fill_zero(void* p, size_t bytes) override {
    if (bytes == 0) return;
    on_device();
    VT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }

  void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    if (bytes == 0) return;
    on_device();
    switch (kind) {
      case CopyKind::kHostToDevice:
        VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
        VT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go on return
        break;
      case CopyKind::kDeviceToHost:
        VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
        VT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the data is there on return
        break;
      case CopyKind::kDeviceToDevice:
        VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
        break;
    }
  }

  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               size_t rows) override {
    if (width == 0 || rows == 0) return;
    on_device();
    VT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                    cudaMemcpyDeviceToDevice, stream_));
  }

  void synchronize() override {
    on_device();
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  size_t bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mem_mu_);
    return in_use_;
  }
  size_t peak_bytes() const override {
    std::lock_guard<std::mutex> lock(mem_mu_);
    return peak_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mem_mu_);
    peak_ = in_use_;
  }

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
    cuda::Gemm& mm = *gemm_;
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
    std::lock_guard<std::mutex> lock(scratch_mu_);
    double* partials = reduce_scratch_;
    double* out = reduce_scratch_ + cuda::kReduceBlocks;
    const int64_t n = a.numel();
    on_acts(stream_, [&](auto ap, auto bp) { cuda::dot(ap, bp, n, partials, out, false, stream_); },
            in(a), in(b));
    return fetch_result(out);
  }

  double sum_squares(const Tensor& x) override {
    on_device();
    need_float(x);
    std::lock_guard<std::mutex> lock(scratch_mu_);
    double* partials = reduce_scratch_;
    double* out = reduce_scratch_ + cuda::kReduceBlocks;
    if (x.dtype() == DType::kF32)
      cuda::sum_squares(f32p(x), x.numel(), partials, out, false, stream_);
    else
      cuda::sum_squares(bf16p(x), x.numel(), partials, out, false, stream_);
    return fetch_result(out);
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
    std::lock_guard<std::mutex> lock(scratch_mu_);
    double* partials = reduce_scratch_;
    double* res = reduce_scratch_ + cuda::kReduceBlocks;
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
    std::lock_guard<std::mutex> lock(scratch_mu_);
    double* partials = reduce_scratch_;
    double* res = reduce_scratch_ + cuda::kReduceBlocks;
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
    std::lock_guard<std::mutex> lock(scratch_mu_);
    double* partials = reduce_scratch_;
    double* out = reduce_scratch_ + cuda::kReduceBlocks;
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
    return fetch_result(out);
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

  // ---------------------------------------------------------------------------------------------
  // Model ops

  void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, int64_t rows, int64_t C,
               float scale, double eps) override {
    on_device();
    float* r = f32_of(rstd);
    const float e = static_cast<float>(eps);
    on_acts(
        stream_,
        [&](auto xp, auto yp) { cuda::rmsnorm_forward(xp, yp, r, rows, C, scale, e, stream_); },
        in(x), out(y));
  }

  void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                        int64_t rows, int64_t C, float scale, bool accumulate) override {
    on_device();
    const float* r = f32_of(rstd);
    on_acts(
        stream_,
        [&](auto xp, auto dyp, auto dxp) {
          cuda::rmsnorm_backward(xp, r, dyp, dxp, rows, C, scale, accumulate, stream_);
        },
        in(x), in(dy), acc(dx, accumulate));
  }

  void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset,
            bool backward) override {
    on_device();
    const int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), hd = x.dim(3);
    VT_CHECK_MSG(hd % 2 == 0 && hd >= 2, "rope needs an even head dim, got " << hd);
    VT_CHECK_MSG(pos_offset >= 0, "rope position offset must be >= 0, got " << pos_offset);
    const float2* table = rope_table(hd, base, T + pos_offset);
    on_acts(
        stream_,
        [&](auto xp, auto yp) {
          if (backward)
            cuda::rope_backward(xp, yp, B, T, H, hd, table, pos_offset, stream_);
          else
            cuda::rope_forward(xp, yp, B, T, H, hd, table, pos_offset, stream_);
        },
        in(x), out(y));
  }


  static const float* maybe_f32(const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; }
  static float* maybe_f32_out(const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, int64_t window, float scale, const Tensor& bias) override {
    on_device();
    if (q.numel() == 0) return;  // the kernels require every dimension >= 1
    const cuda::AttnShape s = ops::attention_shape(q, k, window);
    float* l = f32_of(lse);
    const float* b = maybe_f32(bias);
    // The tensor-core kernels know no logit bias (E-SPA/U-SPA): those take the reference kernels.
    if (b == nullptr && use_tensor_core_attention(s, {&q, &k, &v, &out})) {
      cuda::attention_tc_forward(bf16p(q), bf16p(k), bf16p(v), bf16p(out), l, s, scale, stream_);
      return;
    }
    on_acts(
        stream_,
        [&](auto qp, auto kp, auto vp, auto op) {
          cuda::attention_forward(qp, kp, vp, op, l, s, scale, stream_, b);
        },
        in(q), in(k), in(v), Act{out, false, true});
  }

  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, int64_t window, float scale,
                          const Tensor& bias) override {
    on_device();
    if (q.numel() == 0) return;
    const cuda::AttnShape s = ops::attention_shape(q, k, window);
    const float* l = f32_of(lse);
    const float* b = maybe_f32(bias);
    // The workspace is reused by every call: safe because all calls are ordered on stream_.
    std::lock_guard<std::mutex> lock(scratch_mu_);
    if (b == nullptr && use_tensor_core_attention(s, {&q, &k, &v, &out, &dout, &dq, &dk, &dv})) {
      void* ws = attention_workspace(cuda::attention_tc_backward_workspace_bytes(s));
      cuda::attention_tc_backward(bf16p(q), bf16p(k), bf16p(v), bf16p(out), l, bf16p(dout),
                                  bf16p(dq), bf16p(dk), bf16p(dv), s, scale, ws, stream_);
      return;
    }
    void* ws = attention_workspace(cuda::attention_backward_workspace_bytes(s));
    on_acts(
        stream_,
        [&](auto qp, auto kp, auto vp, auto op, auto dop, auto dqp, auto dkp, auto dvp) {
          cuda::attention_backward(qp, kp, vp, op, l, dop, dqp, dkp, dvp, s, scale, ws, stream_,
                                   b);
        },
        in(q), in(k), in(v), in(out), in(dout), Act{dq, false, true}, Act{dk, false, true},
        Act{dv, false, true});
  }

  void attention_mix(const Tensor& soft, const Tensor& v, const AttnMix& m, int64_t window,
                     const Tensor& out) override {
    on_device();
    if (soft.numel() == 0) return;
    const cuda::AttnShape s = ops::attention_shape(soft, v, window);
    const float *al = maybe_f32(m.alpha), *be = maybe_f32(m.beta), *ga = maybe_f32(m.gamma);
    // v1 joins the dtype dispatch (it is like v); without NeuTRENO v stands in for it, unread.
    const Tensor& v1 = m.lam != 0.0f ? m.v1 : v;
    on_acts(
        stream_,
        [&](auto sp, auto vp, auto v1p, auto op) {
          cuda::attention_mix_forward(sp, vp, m.lam != 0.0f ? v1p : nullptr, al, be, ga, m.lam,
                                      op, s, stream_);
        },
        in(soft), in(v), in(v1), Act{out, false, true});
  }

  void attention_mix_backward(const Tensor& dout, const Tensor& soft, const Tensor& v,
                              const AttnMix& m, int64_t window, const Tensor& dsoft,
                              const Tensor& dv, const AttnMixGrads& g) override {
    on_device();
    if (soft.numel() == 0) return;
    const cuda::AttnShape s = ops::attention_shape(soft, v, window);
    const float *al = maybe_f32(m.alpha), *be = maybe_f32(m.beta), *ga = maybe_f32(m.gamma);
    float *dal = maybe_f32_out(g.dalpha), *dbe = maybe_f32_out(g.dbeta),
          *dga = maybe_f32_out(g.dgamma);
    std::lock_guard<std::mutex> lock(scratch_mu_);
    void* ws = attention_workspace(cuda::attention_mix_workspace_bytes(s));
    const bool has_dv1 = g.dv1.defined();
    // Without a dv1 output, dsoft stands in for it in the dtype dispatch (unwritten).
    const Tensor& dv1 = has_dv1 ? g.dv1 : dsoft;
    on_acts(
        stream_,
        [&](auto dop, auto sp, auto vp, auto dsp, auto dvp, auto dv1p) {
          cuda::attention_mix_backward(dop, sp, vp, al, be, ga, m.lam, dsp, dvp, dal, dbe, dga,
                                       has_dv1 ? dv1p : nullptr, s, ws, stream_);
        },
        in(dout), in(soft), in(v), out(dsoft), inout(dv), Act{dv1, false, has_dv1});
  }

  void relu2(const Tensor& x, const Tensor& y) override {
    on_device();
    const int64_t n = x.numel();
    on_acts(stream_, [&](auto xp, auto yp) { cuda::relu2_forward(xp, yp, n, stream_); }, in(x),
            out(y));
  }

  void relu2_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                      bool accumulate) override {
    on_device();
    const int64_t n = x.numel();
    on_acts(
        stream_,
        [&](auto xp, auto dyp, auto dxp) {
          cuda::relu2_backward(xp, dyp, dxp, n, accumulate, stream_);
        },
        in(x), in(dy), acc(dx, accumulate));
  }

  void embedding(const Tensor& table, int64_t row_begin, const Tensor& ids,
                 const Tensor& out) override {
    on_device();
    const float* tab = f32_of(table);
    const int64_t rows = table.dim(0), C = table.dim(-1), N = ids.numel();
    need_float(out);
    if (out.dtype() == DType::kF32)
      cuda::embedding_forward(tab, row_begin, rows, C, ids_of(ids), N, f32p(out), stream_);
    else
      cuda::embedding_forward(tab, row_begin, rows, C, ids_of(ids), N, bf16p(out), stream_);
  }

  // Deterministic, in id order (see embedding.cuh).
  void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_begin,
                          const Tensor& dtable) override {
    on_device();
    float* dt = f32_of(dtable);
    const int64_t rows = dtable.dim(0), C = dtable.dim(-1), N = ids.numel();
    need_float(dout);
    if (dout.dtype() == DType::kF32)
      cuda::embedding_backward(f32p(dout), ids_of(ids), N, row_begin, rows, C, dt, stream_);
    else
      cuda::embedding_backward(bf16p(dout), ids_of(ids), N, row_begin, rows, C, dt, stream_);
  }

  void xent_partial(const XentArgs& x, const Tensor& row_max, const Tensor& row_sumexp,
                    const Tensor& target_z) override {
    on_device();
    const int64_t ld = x.logits.dim(-1), N = x.logits.numel() / ld;
    need_float(x.logits);
    if (x.logits.dtype() == DType::kF32)
      cuda::xent_partial_forward(f32p(x.logits), N, ld, x.n_valid, x.col_offset,
                                 ids_of(x.targets), x.cap, f32_of(row_max), f32_of(row_sumexp),
                                 f32_of(target_z), stream_);
    else
      cuda::xent_partial_forward(bf16p(x.logits), N, ld, x.n_valid, x.col_offset,
                                 ids_of(x.targets), x.cap, f32_of(row_max), f32_of(row_sumexp),
                                 f32_of(target_z), stream_);
  }

  void xent_rescale(const Tensor& row_sumexp, const Tensor& row_max,
                    const Tensor& global_max) override {
    on_device();
    cuda::xent_rescale(f32_of(row_sumexp), f32_of(row_max), f32_of(global_max),
                       row_sumexp.numel(), stream_);
  }

  void xent_finish(const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_z,
                   const Tensor& lse, const Tensor& loss) override {
    on_device();
    cuda::xent_finish(f32_of(row_max), f32_of(row_sumexp), f32_of(target_z), f32_of(lse),
                      f32_of(loss), lse.numel(), stream_);
  }

  void xent_backward(const XentArgs& x, const Tensor& lse, float grad_scale,
                     const Tensor& dlogits) override {
    on_device();
    const int64_t ld = x.logits.dim(-1), N = x.logits.numel() / ld;
    const float* l = f32_of(lse);
    const int32_t* t = ids_of(x.targets);
    switch (mix_of({&x.logits, &dlogits})) {
      case Mix::kF32:
        cuda::xent_backward(f32p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                            grad_scale, f32p(dlogits), stream_);
        break;
      case Mix::kBF16:
        cuda::xent_backward(bf16p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                            grad_scale, bf16p(dlogits), stream_);
        break;
      case Mix::kMixed:  // the kernels take any (logits, dlogits) dtype pair directly
        if (x.logits.dtype() == DType::kF32)
          cuda::xent_backward(f32p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                              grad_scale, bf16p(dlogits), stream_);
        else
          cuda::xent_backward(bf16p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                              grad_scale, f32p(dlogits), stream_);
        break;
    }
  }

  void gate_sigmoid(const Tensor& z, float gate_scale) override {
    on_device();
    cuda::value_gate_sigmoid(f32_of(z), z.numel(), gate_scale, stream_);
  }

  // ctx, emb, v: G rows of hd (G = gate.numel()); the gate kernels see them as (G, 1 head, hd).
  void gated_mix(const Tensor& ctx, const Tensor& emb, const Tensor& gate,
                 const Tensor& v) override {
    on_device();
    const float* g = f32_of(gate);
    const int64_t G = gate.numel();
    if (G == 0) return;
    const int64_t hd = v.numel() / G;
    on_acts(
        stream_,
        [&](auto cp, auto ep, auto vp) { cuda::value_gated_mix(cp, ep, g, vp, G, 1, hd, stream_); },
        in(ctx), in(emb), out(v));
  }

  void gated_mix_backward(const Tensor& dv, const Tensor& emb, const Tensor& gate,
                          const Tensor& demb, const Tensor& dgate) override {
    on_device();
    const float* g = f32_of(gate);
    float* dg = f32_of(dgate);
    const int64_t G = gate.numel();
    if (G == 0) return;
    const int64_t hd = dv.numel() / G;
    on_acts(
        stream_,
        [&](auto dvp, auto ep, auto dep) {
          cuda::value_gated_mix_backward(dvp, ep, g, dep, dg, G, 1, hd, stream_);
        },
        in(dv), in(emb), out(demb));
  }

  void gate_sigmoid_backward(const Tensor& gate, const Tensor& dgate, float gate_scale,
                             const Tensor& dz) override {
    on_device();
    need_float(dz);
    if (dz.dtype() == DType::kF32)
      cuda::value_gate_sigmoid_backward(f32_of(gate), f32_of(dgate), gate_scale, f32p(dz),
                                        gate.numel(), stream_);
    else
      cuda::value_gate_sigmoid_backward(f32_of(gate), f32_of(dgate), gate_scale, bf16p(dz),
                                        gate.numel(), stream_);
  }

  // ---------------------------------------------------------------------------------------------
  // Optimizer updates (fp32; the kernels form the coefficients in fp64 on the host and apply
  // them in fp32, exactly as optim::adamw_update / muon_momentum / muon_apply do)

  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                    const AdamWStepArgs& a) override {
    on_device();
    VT_CHECK_MSG(a.t >= 1, "AdamW step count must be >= 1, got " << a.t);
    cuda::adamw_update(f32_of(p), f32_of(g), f32_of(m), f32_of(v), p.numel(), a.lr, a.beta1,
                       a.beta2, a.weight_decay, a.eps, a.t, stream_);
  }

  void muon_momentum(const Tensor& g, const Tensor& buf, const Tensor& u,
                     double momentum) override {
    on_device();
    cuda::muon_momentum(f32_of(g), f32_of(buf), f32_of(u), g.numel(), momentum, stream_);
  }

  void muon_apply(const Tensor& p, const Tensor& x, double lr, double weight_decay,
                  double scale) override {
    on_device();
    cuda::muon_apply(f32_of(p), f32_of(x), p.numel(), lr, weight_decay, scale, stream_);
  }

 private:
  void on_device() const {
    if (tl_current_device != device_) {
      VT_CUDA_CHECK(cudaSetDevice(device_));
      tl_current_device = device_;
    }
  }

  // The reduction result at `out` (device) -> host; synchronizes the stream. scratch_mu_ held.
  double fetch_result(const double* out) {
    VT_CUDA_CHECK(cudaMemcpyAsync(reduce_host_, out, sizeof(double), cudaMemcpyDeviceToHost,
                                  stream_));
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return *reduce_host_;
  }

  // The RoPE cos/sin table of (hd, base) covering positions < `positions`: made on first use,
  // regrown (to at least twice its size, so decoding token by token rebuilds it rarely) when a
  // call reaches further; the old one is freed on the stream after the calls that read it.
  const float2* rope_table(int64_t hd, double base, int64_t positions) {
    std::lock_guard<std::mutex> lock(rope_mu_);
    RopeTable& t = rope_tables_[{hd, base}];
    if (positions > t.positions) {
      const int64_t grown = std::max<int64_t>({positions, 2 * t.positions, 64});
      float2* p = nullptr;
      VT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p),
                                    sizeof(float2) * size_t(grown) * size_t(hd / 2), stream_));
      cuda::rope_table(p, grown, hd, base, stream_);
      if (t.p) VT_CUDA_CHECK(cudaFreeAsync(t.p, stream_));
      t.p = p;
      t.positions = grown;
    }
    return t.p;
  }

  // The attention-backward workspace, grown (stream-ordered) when a call needs more. The old
  // block is freed on the stream, after the calls that used it. scratch_mu_ held.
  void* attention_workspace(size_t bytes) {
    bytes = std::max<size_t>(bytes, 256);
    if (bytes > attn_ws_bytes_) {
      if (attn_ws_) VT_CUDA_CHECK(cudaFreeAsync(attn_ws_, stream_));
      attn_ws_ = nullptr;
      attn_ws_bytes_ = 0;
      VT_CUDA_CHECK(cudaMallocAsync(&attn_ws_, bytes, stream_));
      attn_ws_bytes_ = bytes;
    }
    return attn_ws_;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;  // cuBLASLt handle + its workspace

  std::mutex scratch_mu_;              // the reduction scratch and the attention workspace
  double* reduce_scratch_ = nullptr;   // device: kReduceBlocks partials, then the result
  double* reduce_host_ = nullptr;      // pinned host copy of the result
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;

  struct RopeTable {
    float2* p = nullptr;
    int64_t positions = 0;
  };
  std::mutex rope_mu_;  // the RoPE tables
  std::map<std::pair<int64_t, double>, RopeTable> rope_tables_;  // by (head dim, base)

  mutable std::mutex mem_mu_;  // the allocation table and counters
  std::unordered_map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

std::vector<std::string> cuda_device_descriptions() {
  std::vector<std::string> out;
  const int n = cuda::cuda_device_count();
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    char line[512];
    std::snprintf(line, sizeof line, "device %d: %s, %.1f GiB, compute capability %d.%d, %d SMs",
                  d, prop.name, double(prop.totalGlobalMem) / double(1ull << 30), prop.major,
                  prop.minor, prop.multiProcessorCount);
    out.push_back(line);
  }
  return out;
}

void set_cuda_attention_kernels(CudaAttentionKernels k) { g_attention_kernels = int(k); }
CudaAttentionKernels cuda_attention_kernels() { return attention_kernels_now(); }

cudaStream_t cuda_backend_stream() {
  if (!has_backend(Device::kCUDA)) return nullptr;
  auto* cb = dynamic_cast<CudaBackend*>(&backend(Device::kCUDA));
  return cb ? cb->stream() : nullptr;
}

namespace {

// CUDA events on one stream, a pool reused after each recycle().
class CudaEventClock final : public op_profile::DeviceClock {
 public:
  explicit CudaEventClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  int mark() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      VT_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    VT_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return static_cast<int>(used_++);
  }
  double seconds_between(int a, int b) override {
    std::lock_guard<std::mutex> lock(mu_);
    VT_CUDA_CHECK(cudaEventSynchronize(events_[b]));
    float ms = 0;
    VT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[a], events_[b]));
    return double(ms) * 1e-3;
  }
  void recycle() override {
    std::lock_guard<std::mutex> lock(mu_);
    used_ = 0;
  }
  const char* name() const override { return "CUDA events"; }

 private:
  cudaStream_t stream_;
  std::mutex mu_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<op_profile::DeviceClock> make_cuda_profile_clock() {
  cudaStream_t s = cuda_backend_stream();
  if (s == nullptr) return nullptr;
  return std::make_unique<CudaEventClock>(s);
}

}  // namespace vt

#endif  // VTRAIN_HAS_CUDA
