// The RMSNorm op family: y = scale * x / rms(x) per row (row width: the last dimension), rstd f32
// (one per row) kept for the backward. Host kernels: cpu_kernels.h (rmsnorm_*); CUDA kernels:
// kernels/rmsnorm.cu.
#pragma once
#include "core/tensor.h"

namespace vt::ops {

void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, float scale, double eps);
// dx written, or += when accumulate.
void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      float scale, bool accumulate);

}  // namespace vt::ops
