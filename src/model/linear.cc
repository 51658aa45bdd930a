// The blocks' linear GEMMs, bf16 or FP8 (see linear.h).
#include "model/linear.h"

#include "core/arena.h"
#include "core/ops/gemm.h"
#include "model/gpt.h"

namespace vt::linear {
namespace {
// A weight of the model (its arena), not a temporary derived from one (projection.cc's
// reparametrized matrices): its FP8 codes may be cached for the step (ops::Fp8WeightCacheScope).
bool is_weight(const GPT& m, const Tensor& w) { return m.store() && m.store()->holds_weights(w); }
}  // namespace

void forward(const GPT& m, const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate) {
  if (m.fp8())
    ops::matmul_fp8(x, w, y, accumulate, nullptr, is_weight(m, w));
  else
    ops::matmul(x, w, y, accumulate);
}

void backward_dx(const GPT& m, const Tensor& dy, const Tensor& w, const Tensor& dx,
                 bool accumulate) {
  if (m.fp8())
    ops::matmul_dx_fp8(dy, w, dx, accumulate, nullptr, is_weight(m, w));
  else
    ops::matmul_dx(dy, w, dx, accumulate);
}

void backward_dw(const GPT& m, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  if (m.fp8())
    ops::matmul_dw_fp8(x, dy, dw);
  else
    ops::matmul_dw(x, dy, dw);
}

void backward_dw(const GPT& m, const Tensor& x, const Tensor& dy, int param) {
  ParamStore& store = *m.store();
  const Tensor dw = store.grad(param);
  const bool first = store.take_first_write(param);
  if (m.fp8()) {  // the FP8 weight-gradient GEMM accumulates: its first write onto zeros
    if (first) Tensor(dw).zero_();
    ops::matmul_dw_fp8(x, dy, dw);
  } else {
    ops::matmul_dw(x, dy, dw, !first);
  }
}

}  // namespace vt::linear
