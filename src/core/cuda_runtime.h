// The CUDA device runtime, apart from the ops: the device this process runs on, the one compute
// stream everything is queued on, stream-ordered memory and its accounting, copies and
// synchronization, and the scratch the op adapters share (cuBLASLt handle, reduction scratch
// with its pinned result, attention workspace, RoPE cos/sin tables), plus the choice of attention
// kernels. One object per CUDA backend (cuda_backend.cc owns one; the op families of
// core/ops/*.cc reach it through Backend::cuda(), and so does the code that builds
// NcclCommunicators, for the stream); no global state.
// Host-only header, for builds with CUDA (VTRAIN_HAS_CUDA).
//
// Stream. A non-default stream created *blocking* (cudaStreamDefault flags): work on the legacy
// default stream (plain cudaMemcpy, libraries that use stream 0) stays ordered with it.
// Memory. allocate() is cudaMallocAsync (+ cudaMemsetAsync(0) when asked) on the stream from
// the device's default pool, whose release threshold is raised so freed blocks stay cached;
// release() is cudaFreeAsync on the stream, so a block is reused only after every op queued
// before the release. bytes_in_use/peak_bytes count what allocate() handed out (64-byte rounded),
// not this runtime's own scratch.
// Threads. Any host thread may call (on_device() makes the device current on the calling thread
// once per thread); the allocation table, the scratch and the RoPE tables are mutex-guarded.
#pragma once
#if VTRAIN_HAS_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/cuda_gemm.h"
#include "core/op_profile.h"

namespace vt {

// The attention kernels the CUDA backend runs for bf16 activations. kTensorCores (the default):
// the flash kernels on tensor cores (kernels/attention_tc.cuh) wherever they apply (head dim 32,
// 64 or 128, 16-byte aligned tensors), the reference kernels (kernels/attention.cuh) otherwise;
// kReference: always the reference kernels. f32 and mixed-dtype calls always run the reference
// kernels. The environment variable VTRAIN_CUDA_ATTENTION=reference|tensor-cores sets a
// runtime's starting choice; tests switch with CudaRuntime::set_attention_kernels.
enum class CudaAttentionKernels { kTensorCores, kReference };

class CudaRuntime {
 public:
  // Selects this process's device (core/process_device.h), creates the stream, the cuBLASLt
  // handle and the reduction scratch. VT_CHECK-fails without a usable device.
  CudaRuntime();
  // May run from a static destructor at exit: errors are ignored.
  ~CudaRuntime();
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // Makes the device current on the calling thread (once per thread).
  void on_device() const;

  // Memory and transfers (the Backend runtime calls, core/backend.h).
  void* allocate(size_t bytes, bool zero);
  void release(void* p);
  void fill_zero(void* p, size_t bytes);
  // Host<->device copies synchronize (the host buffer may go, the data is there, on return).
  void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind);
  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               size_t rows);
  void synchronize();
  size_t bytes_in_use() const;
  size_t peak_bytes() const;
  void reset_peak();
  int64_t available_bytes() const;

  // Scratch shared by the op adapters, all used in stream order.
  cuda::Gemm& gemm() { return *gemm_; }
  // Guards the reduction scratch and the attention workspace: hold it while using either.
  std::mutex& scratch_mutex() { return scratch_mu_; }
  // Device: the reductions' scratch (kReduceScratch doubles: partials and their counter), then the
  // fp64 result slot (reduction_result()).
  double* reduction_partials() { return reduce_scratch_; }
  double* reduction_result();
  // The fp64 at `out` (device) -> host; synchronizes the stream. scratch_mutex() held.
  double fetch_result(const double* out);
  // The attention workspace of at least `bytes`, grown stream-ordered (the old block freed after
  // the calls that used it). scratch_mutex() held.
  void* attention_workspace(size_t bytes);
  // The RoPE cos/sin table of (hd, base) covering positions < `positions`: made on first use,
  // regrown (to at least twice its size) when a call reaches further.
  const float2* rope_table(int64_t hd, double base, int64_t positions);

  CudaAttentionKernels attention_kernels() const;
  void set_attention_kernels(CudaAttentionKernels k) { attention_kernels_ = int(k); }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;  // cuBLASLt handle + its workspace

  std::mutex scratch_mu_;             // the reduction scratch and the attention workspace
  double* reduce_scratch_ = nullptr;  // device: kReduceScratch (partials, counter), then the result
  double* reduce_host_ = nullptr;     // pinned host copy of the result
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

  mutable std::atomic<int> attention_kernels_{-1};  // -1 until read from VTRAIN_CUDA_ATTENTION
};

// The clock `--profile` times device ops with (core/op_profile.h): CUDA events recorded on
// `stream` before and after each op, read back in batches, so the profile shows each op's time
// on the GPU instead of its launch time.
std::unique_ptr<op_profile::DeviceClock> make_cuda_event_clock(cudaStream_t stream);

}  // namespace vt

#endif  // VTRAIN_HAS_CUDA
