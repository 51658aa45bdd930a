// Value mode `v1` (the BoV paper's ablation, docs/model.md "Value paths"): v = g V1 on the last
// third, g = blocks.i.value.gain (init 1), or with --value-coef NUMBER a fixed g and no gain
// parameter (BoV paper Table 1 rows 3 and 5); target layers have no W_V and cache no values.
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kGain };

class V1Path final : public ValuePath {
 public:
  const char* name() const override { return "v1"; }
  const char* help() const override {
    return "v = g V1 on the last third (no W_V there)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kLastThird; }
  std::vector<ModelOption> options() const override { return {value_ops::value_coef_option()}; }
  absl::Status validate(const ModelConfig& cfg) const override {
    return value_ops::check_value_coef(cfg);
  }
  bool reads_v1() const override { return true; }
  bool target_has_wv() const override { return false; }
  bool caches_values() const override { return false; }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    if (r.config().value_coef_fixed) return;
    p.p[kGain] = r.coef("blocks." + std::to_string(layer) + ".value.gain", 1,
                        InitRule::constant(1.0), layer, ParamGroup::kCoefSkip);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    if (c.params->p[kGain] < 0)
      ops::scale_copy(v, src.v1, static_cast<float>(c.cfg->value_coef));
    else
      ops::scale_copy_coef(v, src.v1, c.store->param(c.params->p[kGain]));
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState&,
                const Tensor& dv, ValueGrads& g) const override {
    if (c.params->p[kGain] < 0) {
      if (g.v1_grad)
        value_ops::accumulate((*g.dvalues)[0], dv, static_cast<float>(c.cfg->value_coef));
      return;
    }
    value_ops::grad_scalar(c, c.params->p[kGain], 0, dv, src.v1);
    if (g.v1_grad)
      value_ops::accumulate_coef((*g.dvalues)[0], dv, c.store->param(c.params->p[kGain]), 0);
  }
};

}  // namespace

const ValuePath& v1_value_path() {
  static const V1Path m;
  return m;
}

}  // namespace vt
