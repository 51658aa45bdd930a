// Value mode `resformer-learnable` (docs/model.md, "Value paths"): v = l1 V1 + l2 n W_V on every
// layer i >= 1, with two learnable scalars per layer, blocks.i.value.lambda1 and .lambda2, both
// starting at 0.5.
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kLambda1, kLambda2 };

class ResformerLearnable final : public ValuePath {
 public:
  const char* name() const override { return "resformer-learnable"; }
  const char* help() const override {
    return "v = l1 V1 + l2 n W_V, learnable l1, l2 (layers >= 1)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  bool reads_v1() const override { return true; }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    const std::string b = "blocks." + std::to_string(layer) + ".value.";
    p.p[kLambda1] = r.coef(b + "lambda1", 1, InitRule::constant(0.5), layer,
                           ParamGroup::kCoefModel);
    p.p[kLambda2] = r.coef(b + "lambda2", 1, InitRule::constant(0.5), layer,
                           ParamGroup::kCoefModel);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    ops::scale_copy_coef(v, src.v1, c.store->param(c.params->p[kLambda1]));
    ops::axpy_coef(v, src.ctx, c.store->param(c.params->p[kLambda2]));
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState&,
                const Tensor& dv, ValueGrads& g) const override {
    value_ops::grad_scalar(c, c.params->p[kLambda1], 0, dv, src.v1);
    value_ops::grad_scalar(c, c.params->p[kLambda2], 0, dv, src.ctx);
    if (g.v1_grad)
      value_ops::accumulate_coef((*g.dvalues)[0], dv, c.store->param(c.params->p[kLambda1]), 0);
    ops::scale_copy_coef(g.dctx, dv, c.store->param(c.params->p[kLambda2]));
  }
};

}  // namespace

const ValuePath& resformer_learnable_value_path() {
  static const ResformerLearnable m;
  return m;
}

}  // namespace vt
