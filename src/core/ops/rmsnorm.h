// The RMSNorm op family: y = scale * x / rms(x) per row (row width: the last dimension), rstd f32
// (one per row) kept for the backward; and its fusions with the residual stream's adds (the add
// before the norm in forward, the sum of two branch gradients in backward). Host kernels:
// cpu_kernels.h (rmsnorm_*, add_rmsnorm_forward); CUDA kernels: kernels/rmsnorm.cu.
#pragma once
#include "core/tensor.h"

namespace vt::ops {

void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, float scale, double eps);
// dx written, or += when accumulate. dy2 (optional): the norm's output has two readers (the
// parallel blocks' branches) and its gradient is dy + dy2, summed inside the kernel; equal to
// axpy(dy, dy2) first, which it replaces (dy itself is not changed). dy2 needs dy's shape and
// the dtype of x, dy and dx.
void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      float scale, bool accumulate, const Tensor& dy2 = Tensor());

// The residual add fused with the RMSNorm that reads the stream: x += delta (in place), then
// y = rmsnorm(x) with rstd saved, and keep (optional) a copy of the new x, the norm's saved input
// when x changes later. Equal, bit for bit on each backend, to axpy(x, delta); copy(keep, x);
// rmsnorm(x, y, rstd, scale, eps), in one pass over the rows (kernels/rmsnorm.cu
// add_rmsnorm_forward_kernel). x, delta, keep and y share one element count and dtype (f32 or
// bf16); y and keep are tensors of their own, aliasing neither x nor delta.
void add_rmsnorm(const Tensor& x, const Tensor& delta, const Tensor& keep, const Tensor& y,
                 const Tensor& rstd, float scale, double eps);

}  // namespace vt::ops
