// What the value modes `v1` and `x0v` share (docs/model.md "Value paths"): a target layer's
// values are v = g S, S a tensor the model already holds (v1: V1; x0v: the layer's own V
// projection of the embedding x0), g = blocks.i.value.gain (init 1, the coefficient group
// kCoefSkip), or with --value-coef NUMBER a fixed g and no gain parameter. A mode names its
// source and where dS goes; this class does the rest.
#pragma once
#include <string>
#include <vector>

#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {

class GainedSourcePath : public ValuePath {
 public:
  DefaultTargets default_targets() const override { return DefaultTargets::kLastThird; }
  std::vector<ModelOption> options() const override { return {value_ops::value_coef_option()}; }
  absl::Status validate(const ModelConfig& cfg) const override {
    return value_ops::check_value_coef(cfg);
  }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    if (r.config().value_coef_fixed) return;
    p.p[kGain] = r.coef("blocks." + std::to_string(layer) + ".value.gain", 1,
                        InitRule::constant(1.0), layer, ParamGroup::kCoefSkip);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    if (c.params->p[kGain] < 0)
      ops::scale_copy(v, source(src), static_cast<float>(c.cfg->value_coef));
    else
      ops::scale_copy_coef(v, source(src), c.store->param(c.params->p[kGain]));
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState&,
                const Tensor& dv, ValueGrads& g) const override {
    if (c.params->p[kGain] < 0) {
      source_grad(g, dv, static_cast<float>(c.cfg->value_coef));
      return;
    }
    value_ops::grad_scalar(c, c.params->p[kGain], 0, dv, source(src));
    source_grad(g, dv, c.store->param(c.params->p[kGain]));
  }

 protected:
  enum { kGain };
  // S.
  virtual const Tensor& source(const ValueSources& src) const = 0;
  // dS from dv = dL/dv, with the fixed coefficient or the gain parameter (a 1-element tensor).
  virtual void source_grad(ValueGrads& g, const Tensor& dv, float coef) const = 0;
  virtual void source_grad(ValueGrads& g, const Tensor& dv, const Tensor& gain) const = 0;
};

}  // namespace vt
