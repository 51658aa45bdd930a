// Value mode `x0v` (docs/model.md, "Value paths"): v = g x0 W_V^i on the last third: layer i's
// own V projection applied to the normalized embedding x0 (which crosses pipeline boundaries),
// g = blocks.i.value.gain (init 1), or with --value-coef NUMBER a fixed g and no gain parameter
// (BoV paper Table 1 row 8).
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kGain };

class X0v final : public ValuePath {
 public:
  const char* name() const override { return "x0v"; }
  const char* help() const override {
    return "v = g x0 W_V on the last third (the V projection of the embedding)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kLastThird; }
  std::vector<ModelOption> options() const override { return {value_ops::value_coef_option()}; }
  absl::Status validate(const ModelConfig& cfg) const override {
    return value_ops::check_value_coef(cfg);
  }
  bool context_from_x0() const override { return true; }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    if (r.config().value_coef_fixed) return;
    p.p[kGain] = r.coef("blocks." + std::to_string(layer) + ".value.gain", 1,
                        InitRule::constant(1.0), layer, ParamGroup::kCoefSkip);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    if (c.params->p[kGain] < 0)
      ops::scale_copy(v, src.ctx, static_cast<float>(c.cfg->value_coef));
    else
      ops::scale_copy_coef(v, src.ctx, c.store->param(c.params->p[kGain]));
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState&,
                const Tensor& dv, ValueGrads& g) const override {
    if (c.params->p[kGain] < 0) {
      ops::scale_copy(g.dctx, dv, static_cast<float>(c.cfg->value_coef));
      return;
    }
    value_ops::grad_scalar(c, c.params->p[kGain], 0, dv, src.ctx);
    ops::scale_copy_coef(g.dctx, dv, c.store->param(c.params->p[kGain]));
  }
};

}  // namespace

const ValuePath& x0v_value_path() {
  static const X0v m;
  return m;
}

}  // namespace vt
