// The elementwise op family of the algebra: conversions (copy), y += alpha x, y = alpha x, the
// same with coefficients read on the device, add_scalar and transpose. Host loops here; CUDA
// kernels: kernels/cast.cu, kernels/value_mix.cu (axpy, scale_copy), kernels/elementwise.cu.
#pragma once
#include <cstdint>

#include "core/backend.h"
#include "core/ops/cast_on.h"
#include "core/tensor.h"

namespace vt::ops {

// y += alpha * x (same numel).
void axpy(const Tensor& y, const Tensor& x, float alpha = 1.0f);
// y = alpha * x (y may be x).
void scale_copy(const Tensor& y, const Tensor& x, float alpha);
// Copy x into y (same numel; converts f32 <-> bf16 when the dtypes differ; any devices).
void copy(const Tensor& y, const Tensor& x);
// t.flat[index] += value (f32).
void add_scalar(const Tensor& t, int64_t index, double value);
// Device-side coefficients: y = coef[index] * x; y += coef[index] * x (coef f32, same device).
void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index = 0);
void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index = 0);
// y (cols, rows) = x (rows, cols)^T; with batch > 1, x and y hold `batch` such matrices one after
// another, each transposed (f32 on a GPU: one launch).
void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols, int64_t batch = 1);

namespace detail {
// The unchecked, unprofiled pieces other core code composes (on b, whose device holds y and x):
// cast_on (core/ops/cast_on.h: Tensor::to) and y += alpha x (attention's backward).
void axpy_on(Backend& b, const Tensor& y, const Tensor& x, float alpha);
}  // namespace detail

}  // namespace vt::ops
