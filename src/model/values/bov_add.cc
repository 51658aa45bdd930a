// Value mode `bov-add` (docs/model.md, "Value paths"): on the last third,
// v = a n W_V + b E_i[id] with learnable a = blocks.i.value.a (init 1) and b = .b (init 0) and
// an aligned table blocks.i.value.table; --bov-add-fixed uses a = b = 0.5 and registers no a/b.
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kA, kB };

class BovAdd final : public ValuePath {
 public:
  const char* name() const override { return "bov-add"; }
  const char* help() const override {
    return "v = a n W_V + b E_i[id] with a value table per layer (last third)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kLastThird; }
  std::vector<ModelOption> options() const override {
    return {{bool_flag("bov-add-fixed", "bov-add with fixed 0.5/0.5 coefficients"),
             [](const Flags& f, ModelConfig& cfg) {
               cfg.bov_add_fixed = f.get_bool("bov-add-fixed");
             },
             [](const ModelConfig& cfg) { return cfg.bov_add_fixed; }}};
  }
  bool has_table() const override { return true; }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    const ModelConfig& cfg = r.config();
    const std::string b = "blocks." + std::to_string(layer) + ".value.";
    if (!cfg.bov_add_fixed) {
      p.p[kA] = r.coef(b + "a", 1, InitRule::constant(1.0), layer, ParamGroup::kCoefMain);
      p.p[kB] = r.coef(b + "b", 1, InitRule::constant(0.0), layer, ParamGroup::kCoefSkip);
    }
    const ModelConfig c = cfg;
    p.table = r.table(b + "table", cfg.kv_dim(),
                      InitRule::make([c, layer](uint64_t seed) {
                        return value_ops::aligned_table_init(c, layer, seed);
                      }),
                      layer);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState& st,
               const Tensor& v) const override {
    st.emb = Tensor::zeros(v.shape(), v.dtype(), v.device());
    value_ops::table_lookup(c, c.params->table, st.emb);
    if (c.params->p[kA] >= 0) {
      ops::scale_copy_coef(v, src.ctx, c.store->param(c.params->p[kA]));
      ops::axpy_coef(v, st.emb, c.store->param(c.params->p[kB]));
    } else {
      ops::scale_copy(v, src.ctx, 0.5f);
      ops::axpy(v, st.emb, 0.5f);
    }
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState& st,
                const Tensor& dv, ValueGrads& g) const override {
    Tensor de = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
    if (c.params->p[kA] >= 0) {
      value_ops::grad_scalar(c, c.params->p[kA], 0, dv, src.ctx);
      value_ops::grad_scalar(c, c.params->p[kB], 0, dv, st.emb);
      ops::scale_copy_coef(g.dctx, dv, c.store->param(c.params->p[kA]));
      ops::scale_copy_coef(de, dv, c.store->param(c.params->p[kB]));
    } else {
      ops::scale_copy(g.dctx, dv, 0.5f);
      ops::scale_copy(de, dv, 0.5f);
    }
    value_ops::table_lookup_backward(c, de, c.params->table);
  }
};

}  // namespace

const ValuePath& bov_add_value_path() {
  static const BovAdd m;
  return m;
}

}  // namespace vt
