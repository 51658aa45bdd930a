// Rotary embedding (rotate-half pairing j <-> j + hd/2) on the GPU; same semantics as
// vt::cpu::rope_forward/backward, including pos_offset. f32 or bf16 tensors (B, T, heads, hd),
// angles and rotation computed in fp32 from double-precision frequencies. Device pointers; the
// output may alias the input.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// Forward rotation: y[j] = x[j] cos - x[j+hd/2] sin, y[j+hd/2] = x[j+hd/2] cos + x[j] sin with
// angle (t + pos_offset) * base^(-2j/hd). hd must be even.
void rope_forward(const float* x, float* y, int64_t B, int64_t T, int64_t heads, int64_t hd,
                  double base, int64_t pos_offset, cudaStream_t stream);
void rope_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t B, int64_t T, int64_t heads,
                  int64_t hd, double base, int64_t pos_offset, cudaStream_t stream);
// The transpose (inverse rotation) applied to dy.
void rope_backward(const float* dy, float* dx, int64_t B, int64_t T, int64_t heads, int64_t hd,
                   double base, int64_t pos_offset, cudaStream_t stream);
void rope_backward(const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t B, int64_t T,
                   int64_t heads, int64_t hd, double base, int64_t pos_offset,
                   cudaStream_t stream);

}  // namespace vt::cuda
