// The op families' dispatch and shared checks (core/ops/dispatch.h).
#include "core/ops/dispatch.h"

#include "core/check.h"

namespace vt::ops::detail {

Dispatch on(const char* op, std::initializer_list<const Tensor*> ts, double flops) {
  const Tensor* first = *ts.begin();
  for (const Tensor* t : ts) {
    VT_CHECK_MSG(t->defined() || t->numel() == 0, op << ": undefined tensor argument");
    VT_CHECK_MSG(t->device() == first->device(),
                 op << ": tensors on different devices (copy them to one device first)");
  }
  return Dispatch(backend(first->device()), op, flops, first->device() != Device::kCPU);
}

void need_f32(const char* op, const Tensor& t, const char* what) {
  VT_CHECK_MSG(t.dtype() == DType::kF32,
               op << ": " << what << " must be f32, got " << dtype_name(t.dtype()));
}

void need_float(const char* op, const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
               op << ": expects f32 or bf16, got " << dtype_name(t.dtype()));
}

}  // namespace vt::ops::detail
