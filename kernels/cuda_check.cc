// Out-of-line parts of cuda_check.cuh: the failure report, the dynamic shared-memory opt-in and
// the device-count probe.
#include "kernels/cuda_check.cuh"

#include <cstdio>
#include <cstdlib>

namespace vt::cuda {

void cuda_fail(cudaError_t err, const char* expr, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: CUDA error %s: %s in %s\n", file, line, cudaGetErrorName(err),
               cudaGetErrorString(err), expr);
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

}  // namespace vt::cuda
