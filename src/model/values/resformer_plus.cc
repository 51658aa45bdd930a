// Value mode `resformer-plus` ("Learnable-Plus", docs/model.md "Value paths"): on every layer
// i >= 1, v = s * softmax(a)_k V1 + l2 n W_V, where k is i's position among the target layers,
// a = value_plus.logits (one logit per target layer, N(0, 0.1), shared by all targets and so
// replicated on every pipeline stage), s = L fixed, l2 = blocks.i.value.lambda2 (init 0.5).
// The softmax is computed once per pass on the host (begin_pass); its backward runs after the
// stage's backward (end_backward).
#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kLambda2 };
enum { kLogits };

class ResformerPlus final : public ValuePath {
 public:
  const char* name() const override { return "resformer-plus"; }
  const char* help() const override {
    return "v = L softmax(a)_k V1 + l2 n W_V, one logit per target (layers >= 1)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  bool reads_v1() const override { return true; }
  void register_shared(ParamRegistrar& r, ValueSharedParams& shared) const override {
    const int64_t n = static_cast<int64_t>(r.config().target_layers.size());
    shared.p[kLogits] = r.scalar("value_plus.logits", n, InitRule::normal(0.1), -1, true);
  }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    p.p[kLambda2] = r.scalar("blocks." + std::to_string(layer) + ".value.lambda2", 1,
                             InitRule::constant(0.5), layer);
  }
  void begin_pass(const ModelConfig& cfg, const ParamStore& store,
                  const ValueSharedParams& shared, std::vector<double>& coef) const override {
    const std::vector<float> logits = store.param(shared.p[kLogits]).to_host_f32();
    const int64_t n = static_cast<int64_t>(logits.size());
    double mx = -1e300, sum = 0.0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, static_cast<double>(logits[k]));
    coef.assign(n, 0.0);
    for (int64_t k = 0; k < n; ++k) sum += (coef[k] = std::exp(logits[k] - mx));
    for (auto& c : coef) c = cfg.n_layer * c / sum;
  }
  void end_backward(const ModelConfig& cfg, const ParamStore& store,
                    const ValueSharedParams& shared, const std::vector<double>& coef,
                    const std::vector<double>& dcoef) const override {
    // coef = s * p; d logits_j = p_j (g_j - sum_k p_k g_k) with g = s * dcoef.
    const double s = cfg.n_layer;
    const int64_t n = static_cast<int64_t>(coef.size());
    double pg = 0.0;
    for (int64_t k = 0; k < n; ++k) pg += (coef[k] / s) * s * dcoef[k];
    for (int64_t j = 0; j < n; ++j) {
      const double p = coef[j] / s;
      ops::add_scalar(store.grad(shared.p[kLogits]), j, p * (s * dcoef[j] - pg));
    }
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    ops::scale_copy(v, src.v1, static_cast<float>((*c.pass_coef)[c.target_index]));
    ops::axpy_coef(v, src.ctx, c.store->param(c.params->p[kLambda2]));
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState&,
                const Tensor& dv, ValueGrads& g) const override {
    const int k = c.target_index;
    (*c.pass_dcoef)[k] += value_ops::dot_host(c, dv, src.v1);
    value_ops::grad_scalar(c, c.params->p[kLambda2], 0, dv, src.ctx);
    if (g.v1_grad)
      value_ops::accumulate((*g.dvalues)[0], dv, static_cast<float>((*c.pass_coef)[k]));
    ops::scale_copy_coef(g.dctx, dv, c.store->param(c.params->p[kLambda2]));
  }
};

}  // namespace

const ValuePath& resformer_plus_value_path() {
  static const ResformerPlus m;
  return m;
}

}  // namespace vt
