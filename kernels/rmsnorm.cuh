// RMSNorm without weight (and QK-norm, which is RMSNorm with scale 1.2 over head_dim rows) on
// the GPU; same semantics as vt::cpu::rmsnorm_forward/backward. f32 or bf16 x/y/dy/dx, fp32
// accumulation, fp32 rstd. All pointers are device pointers; y may alias x, dx may alias dy.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// rstd[r] = 1/sqrt(mean_c(x[r,c]^2) + eps), y[r,c] = scale * x[r,c] * rstd[r]. x, y: (rows, C).
void rmsnorm_forward(const float* x, float* y, float* rstd, int64_t rows, int64_t C, float scale,
                     float eps, cudaStream_t stream);
void rmsnorm_forward(const __nv_bfloat16* x, __nv_bfloat16* y, float* rstd, int64_t rows,
                     int64_t C, float scale, float eps, cudaStream_t stream);

// dx (= or += when accumulate) = scale * rstd * (dy - x * rstd^2 * mean_c(dy * x)).
void rmsnorm_backward(const float* x, const float* rstd, const float* dy, float* dx, int64_t rows,
                      int64_t C, float scale, bool accumulate, cudaStream_t stream);
void rmsnorm_backward(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                      __nv_bfloat16* dx, int64_t rows, int64_t C, float scale, bool accumulate,
                      cudaStream_t stream);

}  // namespace vt::cuda
