// Value mode `resformer-plus` (Learnable-ResFormer Plus, docs/model.md "Value paths"): on every
// layer i >= 1, v = s * softmax(a)_k V1 + l2 n W_V, where k is i's position among the target
// layers, a = value_plus.logits (one logit per target layer, shared by all targets and so
// replicated on every pipeline stage), s = value_plus.scale (shared, trainable, init L) and
// l2 = blocks.i.value.lambda2 (init 0.5). Its options:
//   --plus-init paper   (default) a_k = ln(i_k): softmax(a) proportional to the layer index, so
//                       V1 starts with larger weights in deeper layers (the paper's "adaptive
//                       initialization"; the exact formula is ours, docs/model.md says why);
//   --plus-init blagpt  a_k ~ N(0, 0.1) (BlaGPT's bla_gpt/resformer.py);
//   --plus-scale fixed  s = L, not a parameter (vtrain's resformer-plus before these options).
// The softmax is computed once per pass on the host (begin_pass); its backward runs after the
// stage's backward (end_backward).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kLambda2 };
enum { kLogits, kScale };

class ResformerPlus final : public ValuePath {
 public:
  const char* name() const override { return "resformer-plus"; }
  const char* help() const override {
    return "v = s softmax(a)_k V1 + l2 n W_V, one logit per target (layers >= 1), s init L";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  bool reads_v1() const override { return true; }
  std::vector<ModelOption> options() const override {
    return {{no_default(choice_flag("plus-init", "paper", {"paper", "blagpt"},
                                    "resformer-plus logits: paper (V1 weight growing with depth, "
                                    "default) or blagpt (N(0, 0.1))")),
             [](const Flags& f, ModelConfig& cfg) {
               if (f.has("plus-init")) cfg.plus_init = f.get_string("plus-init");
             },
             [](const ModelConfig& cfg) { return !cfg.plus_init.empty(); }},
            {no_default(choice_flag("plus-scale", "learnable", {"learnable", "fixed"},
                                    "resformer-plus scale s: learnable (init L, default) or "
                                    "fixed at L")),
             [](const Flags& f, ModelConfig& cfg) {
               if (f.has("plus-scale")) cfg.plus_scale = f.get_string("plus-scale");
             },
             [](const ModelConfig& cfg) { return !cfg.plus_scale.empty(); }}};
  }
  void fill_defaults(ModelConfig& cfg) const override {
    if (cfg.plus_init.empty()) cfg.plus_init = "paper";
    if (cfg.plus_scale.empty()) cfg.plus_scale = "learnable";
  }
  absl::Status validate(const ModelConfig& cfg) const override {
    if (cfg.plus_init != "paper" && cfg.plus_init != "blagpt")
      return absl::InvalidArgumentError(
          absl::StrCat("--plus-init '", cfg.plus_init, "' must be paper or blagpt"));
    if (cfg.plus_scale != "learnable" && cfg.plus_scale != "fixed")
      return absl::InvalidArgumentError(
          absl::StrCat("--plus-scale '", cfg.plus_scale, "' must be learnable or fixed"));
    return absl::OkStatus();
  }
  void register_shared(ParamRegistrar& r, ValueSharedParams& shared) const override {
    const ModelConfig& cfg = r.config();
    const std::vector<int> targets = cfg.target_layers;
    const int64_t n = static_cast<int64_t>(targets.size());
    const InitRule logits = cfg.plus_init == "blagpt"
                                ? InitRule::normal(0.1)
                                : InitRule::make([targets](uint64_t) {
                                    std::vector<float> a;
                                    for (int i : targets) a.push_back(std::log(float(i)));
                                    return a;
                                  });
    shared.p[kLogits] = r.coef("value_plus.logits", n, logits, -1, ParamGroup::kCoefModel, true);
    if (cfg.plus_scale != "fixed")
      shared.p[kScale] = r.coef("value_plus.scale", 1, InitRule::constant(cfg.n_layer), -1,
                                ParamGroup::kCoefModel, true);
  }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    p.p[kLambda2] = r.coef("blocks." + std::to_string(layer) + ".value.lambda2", 1,
                           InitRule::constant(0.5), layer, ParamGroup::kCoefModel);
  }
  // coef_k = s p_k with p = softmax(a); coef is followed by one more entry, s itself.
  void begin_pass(const ModelConfig& cfg, const ParamStore& store,
                  const ValueSharedParams& shared, std::vector<double>& coef) const override {
    const std::vector<float> logits = store.param(shared.p[kLogits]).to_host_f32();
    const double s = shared.p[kScale] >= 0
                         ? static_cast<double>(store.param(shared.p[kScale]).to_host_f32()[0])
                         : static_cast<double>(cfg.n_layer);
    const int64_t n = static_cast<int64_t>(logits.size());
    double mx = -1e300, sum = 0.0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, static_cast<double>(logits[k]));
    coef.assign(n, 0.0);
    for (int64_t k = 0; k < n; ++k) sum += (coef[k] = std::exp(logits[k] - mx));
    for (auto& c : coef) c = s * c / sum;
    coef.push_back(s);
  }
  void end_backward(const ModelConfig& cfg, const ParamStore& store,
                    const ValueSharedParams& shared, const std::vector<double>& coef,
                    const std::vector<double>& dcoef) const override {
    // coef_k = s p_k: d a_j = s p_j (g_j - sum_k p_k g_k) with g = dcoef; d s = sum_k p_k g_k.
    const int64_t n = static_cast<int64_t>(coef.size()) - 1;
    const double s = coef[n];
    auto p = [&](int64_t k) { return s != 0.0 ? coef[k] / s : 0.0; };
    double pg = 0.0;
    for (int64_t k = 0; k < n; ++k) pg += p(k) * dcoef[k];
    for (int64_t j = 0; j < n; ++j)
      ops::add_scalar(store.grad(shared.p[kLogits]), j, s * p(j) * (dcoef[j] - pg));
    if (shared.p[kScale] >= 0) ops::add_scalar(store.grad(shared.p[kScale]), 0, pg);
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
