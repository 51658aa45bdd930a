// Value modes with fixed mixing coefficients (docs/model.md, "Value paths"):
//   resformer-identity  v = 0.5 V1 + 0.5 n W_V   (all i >= 1; the official ResFormer code)
//   resformer-constant  v = 2 V1 + n W_V         (all i >= 1; the paper's best constant)
//   resformer-sparse    v = 5 V1 + n W_V         (last third)
// One class, three instances.
#include "core/ops.h"
#include "model/config.h"
#include "model/value_path.h"

namespace vt {
namespace {

class ResformerFixed final : public ValuePath {
 public:
  ResformerFixed(const char* name, const char* help, float l1, float l2, DefaultTargets targets)
      : name_(name), help_(help), l1_(l1), l2_(l2), targets_(targets) {}
  const char* name() const override { return name_; }
  const char* help() const override { return help_; }
  DefaultTargets default_targets() const override { return targets_; }
  bool reads_v1() const override { return true; }
  void forward(const ValueLayerCtx&, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    ops::scale_copy(v, src.v1, l1_);
    ops::axpy(v, src.ctx, l2_);
  }
  void backward(const ValueLayerCtx&, const ValueSources&, const ValueState&, const Tensor& dv,
                ValueGrads& g) const override {
    if (g.v1_grad) value_ops::accumulate((*g.dvalues)[0], dv, l1_);
    if (l2_ == 1.0f)
      ops::copy(g.dctx, dv);
    else
      ops::scale_copy(g.dctx, dv, l2_);
  }

 private:
  const char* name_;
  const char* help_;
  float l1_, l2_;
  DefaultTargets targets_;
};

}  // namespace

const ValuePath& resformer_identity_value_path() {
  static const ResformerFixed m("resformer-identity", "v = 0.5 V1 + 0.5 n W_V on every layer >= 1",
                                 0.5f, 0.5f, DefaultTargets::kAll);
  return m;
}
const ValuePath& resformer_constant_value_path() {
  static const ResformerFixed m("resformer-constant", "v = 2 V1 + n W_V on every layer >= 1",
                                 2.0f, 1.0f, DefaultTargets::kAll);
  return m;
}
const ValuePath& resformer_sparse_value_path() {
  static const ResformerFixed m("resformer-sparse", "v = 5 V1 + n W_V on the last third",
                                 5.0f, 1.0f, DefaultTargets::kLastThird);
  return m;
}

}  // namespace vt
