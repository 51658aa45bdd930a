// The activation op family: relu^2 (y = max(x, 0)^2) and relu (y = max(x, 0), --mlp-act relu)
// and their backwards, on f32 or bf16 tensors of equal numel. Host kernels: cpu_kernels.h
// (relu2_*, relu_*); CUDA kernels: kernels/activation.cu.
#pragma once
#include "core/tensor.h"

namespace vt::ops {

void relu2(const Tensor& x, const Tensor& y);
// dx = dy * 2 max(x, 0), or += when accumulate.
void relu2_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate);
void relu(const Tensor& x, const Tensor& y);
// dx = dy * [x > 0] (0 at x = 0), or += when accumulate.
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate);

}  // namespace vt::ops
