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

// dx (= or += when accumulate) = scale * rstd * (dy - x * rstd^2 * mean_c(dy * x)). With dy2
// (may be null), dy is replaced by g = dy + dy2 rounded to the element type (what an axpy of dy2
// into dy stores), formed in registers: two branches' gradients of one norm without their sum.
void rmsnorm_backward(const float* x, const float* rstd, const float* dy, float* dx, int64_t rows,
                      int64_t C, float scale, bool accumulate, cudaStream_t stream,
                      const float* dy2 = nullptr);
void rmsnorm_backward(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                      __nv_bfloat16* dx, int64_t rows, int64_t C, float scale, bool accumulate,
                      cudaStream_t stream, const __nv_bfloat16* dy2 = nullptr);

// The residual add fused with the RMSNorm that reads it, one block per row: x += delta (in place,
// rounded to the element type), keep (may be null) = the new x, rstd and y = scale * x * rstd of
// the new x. Equals value_axpy(1, delta, x); a copy into keep; rmsnorm_forward(x, y) bit for bit,
// reading x and delta once and writing x, keep and y once. y must not alias x, delta or keep.
void add_rmsnorm_forward(float* x, const float* delta, float* keep, float* y, float* rstd,
                         int64_t rows, int64_t C, float scale, float eps, cudaStream_t stream);
void add_rmsnorm_forward(__nv_bfloat16* x, const __nv_bfloat16* delta, __nv_bfloat16* keep,
                         __nv_bfloat16* y, float* rstd, int64_t rows, int64_t C, float scale,
                         float eps, cudaStream_t stream);

}  // namespace vt::cuda
