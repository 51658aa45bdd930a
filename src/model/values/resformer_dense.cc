// Value mode `resformer-dense` (docs/model.md, "Value paths"): on every layer i >= 1,
// v = sum_{j<i} l_ij V_j + l_ii n_i W_V^i, where V_j is layer j's *context* value (V_0 = V1) and
// blocks.i.value.dense = [l_i0 .. l_i,i-1, l_ii] starts at 1/i then 1. Every earlier layer's
// context value is kept (and crosses pipeline boundaries) until the last target reads it.
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kDense };

class ResformerDense final : public ValuePath {
 public:
  const char* name() const override { return "resformer-dense"; }
  const char* help() const override {
    return "v = sum_j l_ij V_j + l_ii n W_V over every earlier layer (layers >= 1)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  bool reads_v1() const override { return true; }
  bool reads_all_values() const override { return true; }
  bool keeps_value(const ModelConfig& cfg, int layer) const override {
    return !cfg.target_layers.empty() && layer < cfg.target_layers.back();
  }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    const int i = layer;
    p.p[kDense] = r.coef("blocks." + std::to_string(i) + ".value.dense", i + 1,
                         InitRule::make([i](uint64_t) {
                           std::vector<float> out(i + 1, static_cast<float>(1.0 / i));
                           out.back() = 1.0f;
                           return out;
                         }),
                         layer, ParamGroup::kCoefModel);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    const Tensor l = c.store->param(c.params->p[kDense]);
    ops::scale_copy_coef(v, src.ctx, l, c.layer);
    for (int j = 0; j < c.layer; ++j) ops::axpy_coef(v, src.values[j], l, j);
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState&,
                const Tensor& dv, ValueGrads& g) const override {
    const int idx = c.params->p[kDense];
    const Tensor l = c.store->param(idx);
    for (int j = 0; j < c.layer; ++j) {
      value_ops::grad_scalar(c, idx, j, dv, src.values[j]);
      if (j > 0 || g.v1_grad) value_ops::accumulate_coef((*g.dvalues)[j], dv, l, j);
    }
    value_ops::grad_scalar(c, idx, c.layer, dv, src.ctx);
    ops::scale_copy_coef(g.dctx, dv, l, c.layer);
  }
};

}  // namespace

const ValuePath& resformer_dense_value_path() {
  static const ResformerDense m;
  return m;
}

}  // namespace vt
