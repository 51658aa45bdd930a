// The reduction op family: fp64 dot products and sums of squares (returned to the host, which
// synchronizes with the device), the same left on the device (dot_into), and the Frobenius
// normalization of Newton-Schulz. Host loops here (chunked fp64 sums); CUDA kernels:
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
// x /= sqrt(sum(x^2)) * scale + eps, on the device (the division in double, rounded once).
void normalize_frobenius(const Tensor& x, double scale, double eps);
// out = x / (sqrt(sum(x^2)) * scale + eps), x (f32) left as it is: the bits of copying x into an f32
// tensor, normalizing that and casting it to out's dtype (f32 or bf16), in one pass over x.
void normalize_frobenius(const Tensor& x, double scale, double eps, const Tensor& out);

}  // namespace vt::ops
