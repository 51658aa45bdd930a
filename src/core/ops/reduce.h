// The reduction op family: fp64 dot products and sums of squares (returned to the host, which
// synchronizes with the device), the same left on the device (dot_into), and the Frobenius
// normalization of Newton-Schulz, and an optimizer step's guard formed on the device
// (step_guard: kernels/step_guard.cu). Host loops here (chunked fp64 sums); CUDA kernels:
// kernels/reduce.cu (block partials in fp64) and kernels/elementwise.cu (double_to_float,
// div_by_norm, div_by_norm_to), through the CUDA runtime's reduction scratch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace vt::ops {

// sum(a * b) and sum(x^2) in double (synchronizes with the device).
double dot(const Tensor& a, const Tensor& b);
double sum_squares(const Tensor& x);
// Sum of sum_squares over tensors of one device, in list order (one synchronization).
double sum_squares_list(const std::vector<Tensor>& xs);
// out.flat[index] = float(sum(a * b)) (fp64 accumulation), without synchronizing.
void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index = 0);
// The step's guard formed where the gradients are, without a host read: the fp64 sum of squares
// of `grads` (f32/bf16, one device; summed in list order with sum_squares_list's blocks and
// order: the same bits), then in guard = scalars.flat(0, kGuardFloats) the clip factor for
// max_grad_norm (optim/clip.h's clip_scale of its square root; 1 when max_grad_norm <= 0), apply
// = 1 when that norm and every element of `losses` (f32, may be empty) are finite, else 0, and
// the sum of squares' 8 bytes (read back by guard_sum_squares).
void step_guard(const std::vector<Tensor>& grads, const Tensor& losses, double max_grad_norm,
                const Tensor& scalars);
// The fp64 sum of squares in a guard's floats (host memory: a copy of the guard).
double guard_sum_squares(const float* guard);
// x /= sqrt(sum(x^2)) * scale + eps, on the device (the division in double, rounded once).
void normalize_frobenius(const Tensor& x, double scale, double eps);
// out = x / (sqrt(sum(x^2)) * scale + eps), x (f32) left as it is: the bits of copying x into an f32
// tensor, normalizing that and casting it to out's dtype (f32 or bf16), in one pass over x.
void normalize_frobenius(const Tensor& x, double scale, double eps, const Tensor& out);
// Segmented (a batch of matrices, Muon's batched Newton-Schulz): x (f32) holds `segments` equal
// segments of x.numel() / segments elements one after another, each divided by its own norm,
// sqrt(sum of its squares) * scale + eps: bit for bit normalize_frobenius on each segment alone
// (on every backend: the CUDA kernels reduce each segment with that op's blocks and combine
// order), in place or into out (f32 or bf16, not aliasing x). Two kernels for all segments on
// a GPU where the per-segment op takes two per segment.
void normalize_frobenius_segments(const Tensor& x, int64_t segments, double scale, double eps);
void normalize_frobenius_segments(const Tensor& x, int64_t segments, double scale, double eps,
                                  const Tensor& out);

}  // namespace vt::ops
