// What every op family (core/ops/*.cc, ops.cc) shares: the dispatch handle (the backend of one
// op's tensors, timed by core/op_profile.h while it is held) and the common argument checks.
// An op family computes on the host when dispatch.cuda() is nullptr (the CPU backend and the
// device emulator keep tensors in host memory) and launches its kernels on the CUDA runtime's
// stream otherwise.
#pragma once
#include <initializer_list>

#include "core/backend.h"
#include "core/op_profile.h"
#include "core/tensor.h"

namespace vt::ops::detail {

class Dispatch {
 public:
  Dispatch(Backend& b, const char* op, double flops, bool on_device)
      : b_(b), scope_(op, flops, on_device) {}
  Backend* operator->() const { return &b_; }
  // The CUDA runtime of the op's backend, nullptr for the backends that compute on the host.
  CudaRuntime* cuda() const { return b_.cuda(); }
  Backend& backend() const { return b_; }

 private:
  Backend& b_;
  op_profile::Scope scope_;
};

// The backend of one op's tensors: all defined (or empty) and on one device; VT_CHECK-fails
// otherwise. `flops` feeds the profile.
Dispatch on(const char* op, std::initializer_list<const Tensor*> ts, double flops = 0);

// VT_CHECK-fails unless t is f32 (`what` names the argument) / f32 or bf16.
void need_f32(const char* op, const Tensor& t, const char* what);
void need_float(const char* op, const Tensor& t);

}  // namespace vt::ops::detail
