// The rotary-embedding op family: y = RoPE(x) on (B, T, heads, hd) tensors (hd even), positions
// from pos_offset, and its backward (the inverse rotation); and RoPE fused with the QK-norm that
// reads it (rope_rmsnorm). Host kernels: cpu_kernels.h (rope_*); CUDA kernels: kernels/rope.cu,
// with the cos/sin tables cached by the CUDA runtime.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt::ops {

void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset = 0);
void rope_backward(const Tensor& dy, const Tensor& dx, double base, int64_t pos_offset = 0);

// RoPE fused with the QK-norm after it (issue 29): y = rmsnorm(rope(x)) per head, i.e.
// y = scale * rstd * R x with rstd = 1/sqrt(mean(x^2) + eps) of the pre-RoPE head vector (a
// rotation keeps its norm), one f32 rstd per (b, t, head). x: (B, T, heads, hd) before RoPE, hd
// even; y: x's element count and dtype (f32 or bf16), may be x itself (in place) but no other
// overlap; rstd: f32, B*T*heads entries. One pass: x read once, y written once
// (kernels/rope.cu rope_rmsnorm_forward_kernel). Equal to rope then rmsnorm up to the rounding of
// the rotated copy the unfused pair stores (none in f32 beyond the sum of squares' order; one
// bf16 rounding of R x skipped in bf16).
void rope_rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, double base, float scale,
                  double eps, int64_t pos_offset = 0);
// Its backward from the saved pre-RoPE x and rstd: dx = scale * rstd * (g - x * rstd^2 *
// mean(g * x)) with g = R^T dy (rmsnorm_backward then rope_backward). dx is written (not
// accumulated); it may be dy itself, never x or rstd. x, dy, dx share element count and dtype.
void rope_rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                           double base, float scale, int64_t pos_offset = 0);

}  // namespace vt::ops
