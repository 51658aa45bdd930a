// The rotary-embedding op family: y = RoPE(x) on (B, T, heads, hd) tensors (hd even), positions
// from pos_offset, and its backward (the inverse rotation). Host kernels: cpu_kernels.h
// (rope_*); CUDA kernels: kernels/rope.cu, with the cos/sin tables cached by the CUDA runtime.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt::ops {

void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset = 0);
void rope_backward(const Tensor& dy, const Tensor& dx, double base, int64_t pos_offset = 0);

}  // namespace vt::ops
