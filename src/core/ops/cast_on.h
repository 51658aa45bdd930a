// The one op piece core's own Tensor code needs (Tensor::to with a dtype conversion): a leaf
// header of declarations only, so that tensor.cc reaches the elementwise family
// (core/ops/elementwise.cc, which defines it) without an include circle.
#pragma once

namespace vt {
class Backend;
class Tensor;

namespace ops::detail {
// y = x converted to y's dtype (f32 <-> bf16, or a plain copy for equal dtypes) on b, whose
// device holds both; unchecked and unprofiled.
void cast_on(Backend& b, const Tensor& y, const Tensor& x);
}  // namespace ops::detail
}  // namespace vt
