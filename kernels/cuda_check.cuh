// CUDA error checking (VT_CUDA_CHECK names file:line and aborts) and the device-count probe that
// decides at run time whether the CUDA backend can be used (0 when there is no driver or GPU).
// Host-only header: safe to include from .cc files compiled by the host compiler.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace vt::cuda {

// Prints "<file>:<line>: CUDA error <name>: <message> in <expr>" to stderr and aborts; while
// the calling thread captures a CUDA graph (capture_label non-null) the message also names the
// graph, since a call the graph cannot hold is then the likely cause.
[[noreturn]] void cuda_fail(cudaError_t err, const char* expr, const char* file, int line);
// The name of the CUDA graph the calling thread is capturing (src/core/cuda_graph.h), or nullptr.
const char*& capture_label();
// Prints "<file>:<line>: check failed: <cond>: <msg>" to stderr and aborts (argument checks of
// the kernel launchers, which do not depend on vtrain_lib's VT_CHECK).
[[noreturn]] void require_fail(const char* cond, const char* msg, const char* file, int line);

// Number of usable CUDA devices; 0 (never an error) when no driver, no device or a driver too
// old for this runtime. Clears the sticky runtime error such a probe leaves behind.
int cuda_device_count();

// Allows `kernel` (a __global__ function, as const void*) `bytes` of dynamic shared memory per
// block on the current device, after checking the device offers that much (aborts naming
// `what` otherwise). Needed above 48 KiB.
void set_dynamic_smem(const void* kernel, size_t bytes, const char* what);

// Grid size for a grid-stride loop over n elements with `threads` threads per block.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = 65535LL * 16;  // enough blocks to fill any GPU; the loop covers the rest
  return static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
}

// Streaming multiprocessors of the current device (asked once per device, then cached).
int sm_count();

// Grid of a grid-stride kernel over `work` items with `threads` threads per block: one block per
// `threads` items, at most blocks_per_sm blocks per SM of the current device (one wave when that
// many blocks fit an SM; the loop covers the rest).
unsigned grid_for_sms(int64_t work, int threads, int blocks_per_sm);

}  // namespace vt::cuda

#define VT_CUDA_CHECK(expr)                                                \
  do {                                                                     \
    const cudaError_t vt_cuda_err_ = (expr);                               \
    if (vt_cuda_err_ != cudaSuccess)                                       \
      ::vt::cuda::cuda_fail(vt_cuda_err_, #expr, __FILE__, __LINE__);      \
  } while (0)

// Aborts with file:line and `msg` when an argument invariant of a launcher does not hold.
#define VT_CUDA_REQUIRE(cond, msg)                                               \
  do {                                                                           \
    if (!(cond)) ::vt::cuda::require_fail(#cond, msg, __FILE__, __LINE__);       \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define VT_CUDA_CHECK_LAUNCH() VT_CUDA_CHECK(cudaGetLastError())
