// The CUDA backend: the Backend interface (core/backend.h) over one CudaRuntime
// (core/cuda_runtime.h), which owns the device, the stream, memory, copies and the scratch the
// op families use. Every op is an op family's CUDA side (core/ops/*.cc), reached through
// Backend::cuda(); this file adds no op of its own.
//
// Execution model. Everything is enqueued on the runtime's one stream, so consecutive ops are
// ordered by the stream alone and calls return without waiting, except host<->device copies,
// ops that return a number (dot, sum_squares: the fp64 result goes through pinned memory, then
// the stream is synchronized) and synchronize(). NcclCommunicator is given this stream when it
// is built (cuda_compute_stream; see src/parallel/nccl_communicator.h).
//
// Dtypes. Activations are f32 or bf16. When all activation arguments of a call share one dtype
// the f32 or bf16 kernel runs directly; a call mixing f32 and bf16 activations (which the CPU
// backend accepts) widens its bf16 arguments into fp32 temporaries, runs the fp32 kernel and
// rounds the outputs back to bf16 (core/ops/cuda_acts.h): exactly what the CPU backend does.
// rstd, lse, gates, cross-entropy statistics, parameters, gradients and optimizer states are f32.
//
// Differences from the CPU backend that tests must allow for (the CUDA side of every op family):
// summation orders (block reductions instead of sequential loops; row sums in fp32 where the
// CPU uses fp64 in xent_partial, rmsnorm and gated_mix_backward's gate gradient), cuBLASLt
// instead of OpenBLAS, and fused multiply-adds chosen by nvcc. Every op is deterministic run to
// run (no atomics: embedding_backward adds repeated ids in id order, like the CPU).
//
// Threads. Ops may be called from any host thread (the runtime makes its device current on the
// calling thread first); calls from several threads are all ordered by the one stream. A Tensor
// must not outlive the backend that allocated it.
#if VTRAIN_HAS_CUDA

#include <cuda_runtime_api.h>

#include <memory>

#include "core/backend.h"
#include "core/cuda_backend.h"
#include "core/cuda_runtime.h"

namespace vt {

namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend() = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  CudaRuntime* cuda() override { return &rt_; }

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

 private:
  CudaRuntime rt_;
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
