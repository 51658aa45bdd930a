// Out-of-line parts of cuda_check.cuh: the failure report, the dynamic shared-memory opt-in, the
// device-count probe and the SM-sized grids.
#include "kernels/cuda_check.cuh"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace vt::cuda {

const char*& capture_label() {
  static thread_local const char* label = nullptr;
  return label;
}

void cuda_fail(cudaError_t err, const char* expr, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: CUDA error %s: %s in %s\n", file, line, cudaGetErrorName(err),
               cudaGetErrorString(err), expr);
  if (const char* graph = capture_label())
    std::fprintf(stderr,
                 "  (while capturing the CUDA graph '%s': this call cannot be part of a graph; "
                 "move it out of the captured step or run the step without graphs)\n",
                 graph);
  std::fflush(stderr);
  std::abort();
}

void require_fail(const char* cond, const char* msg, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file, line, cond, msg ? ": " : "",
               msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

void set_dynamic_smem(const void* kernel, size_t bytes, const char* what) {
  int dev = 0, max_optin = 0;
  VT_CUDA_CHECK(cudaGetDevice(&dev));
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > size_t(max_optin)) {
    std::fprintf(stderr,
                 "%s needs %zu bytes of shared memory per block; this GPU offers %d\n", what,
                 bytes, max_optin);
    std::abort();
  }
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(bytes)));
}

int cuda_device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls do not see it
    return 0;
  }
  return n;
}

int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};  // 0: not asked yet
  int dev = 0;
  VT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kMaxDevices) {
    const int n = cached[dev].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  if (n < 1) n = 1;
  if (dev >= 0 && dev < kMaxDevices) cached[dev].store(n, std::memory_order_relaxed);
  return n;
}

unsigned grid_for_sms(int64_t work, int threads, int blocks_per_sm) {
  const int64_t want = (work + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sm_count()) * blocks_per_sm;
  return static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
}

}  // namespace vt::cuda
