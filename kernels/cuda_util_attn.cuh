// Local error-check helpers for the attention, GEMM and NCCL files (kernels/attention.cu,
// kernels/gemm.cu, kernels/nccl_communicator.cu). A stand-in for kernels/cuda_check.cuh, which
// lands separately; once that exists these macros can be replaced by its ones. They depend on
// nothing of vtrain_lib (no VT_CHECK), so vtrain_cuda links without vtrain_lib's symbols.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace vt::cuda_attn_detail {
[[noreturn]] inline void fail(const char* file, int line, const char* what, const char* detail) {
  std::fprintf(stderr, "%s:%d: CUDA check failed: %s%s%s\n", file, line, what,
               detail ? ": " : "", detail ? detail : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace vt::cuda_attn_detail

// Aborts with file:line and the CUDA error string when a runtime call fails.
#define VT_ATTN_CUDA_CHECK(expr)                                                         \
  do {                                                                                    \
    const cudaError_t vt_attn_err_ = (expr);                                              \
    if (vt_attn_err_ != cudaSuccess)                                                      \
      ::vt::cuda_attn_detail::fail(__FILE__, __LINE__, #expr,                             \
                                   cudaGetErrorString(vt_attn_err_));                     \
  } while (0)

// Aborts with file:line and `msg` when an argument invariant does not hold.
#define VT_ATTN_REQUIRE(cond, msg)                                                       \
  do {                                                                                    \
    if (!(cond)) ::vt::cuda_attn_detail::fail(__FILE__, __LINE__, #cond, msg);            \
  } while (0)

namespace vt {
// Number of usable CUDA devices; 0 when there is no driver or no device (never aborts).
inline int attn_cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}
}  // namespace vt
