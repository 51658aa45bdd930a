// Rotary embedding (rotate-half pairing j <-> j + hd/2) on the GPU; same semantics as
// vt::cpu::rope_forward/backward, including pos_offset; and RoPE fused with the QK-norm after it
// (vt::cpu::rope_rmsnorm_forward/backward). f32 or bf16 tensors (B, T, heads, hd);
// the output may alias the input. Angles come from a table of cos/sin per (position, pair)
// built once (rope_table) instead of double-precision exp2/cos/sin per element: the CUDA backend
// keeps one table per (head dim, base), grown when a call needs later positions.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// table[p * hd/2 + j] = (cos a, sin a), a = p * base^(-2j/hd), for positions p < `positions`:
// the angle in double (p * inv_freq reaches ~1e4 radians at long context, where an fp32 product
// would lose ~1e-3 of phase), its cos and sin rounded to fp32, as the CPU's tables. hd even.
void rope_table(float2* table, int64_t positions, int64_t hd, double base, cudaStream_t stream);

// Forward rotation: y[j] = x[j] cos - x[j+hd/2] sin, y[j+hd/2] = x[j+hd/2] cos + x[j] sin with
// the angle of position t + pos_offset; `table` must cover positions < T + pos_offset.
void rope_forward(const float* x, float* y, int64_t B, int64_t T, int64_t heads, int64_t hd,
                  const float2* table, int64_t pos_offset, cudaStream_t stream);
void rope_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t B, int64_t T, int64_t heads,
                  int64_t hd, const float2* table, int64_t pos_offset, cudaStream_t stream);
// The transpose (inverse rotation) applied to dy.
void rope_backward(const float* dy, float* dx, int64_t B, int64_t T, int64_t heads, int64_t hd,
                   const float2* table, int64_t pos_offset, cudaStream_t stream);
void rope_backward(const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t B, int64_t T,
                   int64_t heads, int64_t hd, const float2* table, int64_t pos_offset,
                   cudaStream_t stream);

// RoPE fused with QK-norm, one warp per (b, t, head) vector, its pairs held in registers (hd <=
// 512): rstd[i] = 1/sqrt(mean(x^2) + eps) of the pre-RoPE vector, y = scale * rstd * R x; x read
// once, y written once. y may alias x (each lane writes only the pairs it read).
void rope_rmsnorm_forward(const float* x, float* y, float* rstd, int64_t B, int64_t T,
                          int64_t heads, int64_t hd, const float2* table, int64_t pos_offset,
                          float scale, float eps, cudaStream_t stream);
void rope_rmsnorm_forward(const __nv_bfloat16* x, __nv_bfloat16* y, float* rstd, int64_t B,
                          int64_t T, int64_t heads, int64_t hd, const float2* table,
                          int64_t pos_offset, float scale, float eps, cudaStream_t stream);
// Its backward: g = R^T dy, dx = scale * rstd * (g - x * rstd^2 * mean(g * x)); x, dy and rstd
// read once, dx written once. dx may alias dy, not x.
void rope_rmsnorm_backward(const float* x, const float* rstd, const float* dy, float* dx,
                           int64_t B, int64_t T, int64_t heads, int64_t hd, const float2* table,
                           int64_t pos_offset, float scale, cudaStream_t stream);
void rope_rmsnorm_backward(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                           __nv_bfloat16* dx, int64_t B, int64_t T, int64_t heads, int64_t hd,
                           const float2* table, int64_t pos_offset, float scale,
                           cudaStream_t stream);

}  // namespace vt::cuda
