// Value mode `bov`, the Bank of Values (docs/model.md, "Value paths"): on the last third,
// v = g E_i[id], a row of the layer's value table (Vp x Hkv*hd, split by vocabulary rows over
// TP, aligned init E_i = norm(wte_init) W_V^i_init) times g = blocks.i.value.gain (init 1). Target
// layers have no W_V; the KV cache keeps no values for them, only the token ids (the rows are
// looked up again). --shared-table: one `value.table` for every target (replicated on every
// pipeline stage), aligned with the first target's W_V.
#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kGain };
enum { kSharedTable };

class Bov final : public ValuePath {
 public:
  const char* name() const override { return "bov"; }
  const char* help() const override {
    return "Bank of Values: v = g E_i[id], a value table per layer (last third)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kLastThird; }
  std::vector<ModelOption> options() const override {
    return {{bool_flag("shared-table", "one value table for all target layers (bov)"),
             [](const Flags& f, ModelConfig& cfg) {
               cfg.shared_table = f.get_bool("shared-table");
             },
             [](const ModelConfig& cfg) { return cfg.shared_table; }}};
  }
  bool target_has_wv() const override { return false; }
  bool has_table() const override { return true; }
  bool caches_values() const override { return false; }
  bool cache_keeps_ids() const override { return true; }
  void register_shared(ParamRegistrar& r, ValueSharedParams& shared) const override {
    const ModelConfig& cfg = r.config();
    if (!cfg.shared_table || cfg.target_layers.empty()) return;
    const ModelConfig c = cfg;
    const int first = cfg.target_layers.front();
    shared.p[kSharedTable] = r.table(
        "value.table", cfg.kv_dim(),
        InitRule::make([c, first](uint64_t seed) {
          return value_ops::aligned_table_init(c, first, seed);
        }),
        -1, true);
  }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams& shared,
                      ValueLayerParams& p) const override {
    const ModelConfig& cfg = r.config();
    const std::string b = "blocks." + std::to_string(layer) + ".value.";
    p.p[kGain] = r.coef(b + "gain", 1, InitRule::constant(1.0), layer, ParamGroup::kCoefSkip);
    if (cfg.shared_table) {
      p.table = shared.p[kSharedTable];
      return;
    }
    const ModelConfig c = cfg;
    p.table = r.table(b + "table", cfg.kv_dim(),
                      InitRule::make([c, layer](uint64_t seed) {
                        return value_ops::aligned_table_init(c, layer, seed);
                      }),
                      layer);
  }
  void forward(const ValueLayerCtx& c, const ValueSources&, ValueState& st,
               const Tensor& v) const override {
    st.emb = Tensor::zeros(v.shape(), v.dtype(), v.device());
    value_ops::table_lookup(c, c.params->table, st.emb);
    ops::scale_copy_coef(v, st.emb, c.store->param(c.params->p[kGain]));
  }
  void backward(const ValueLayerCtx& c, const ValueSources&, const ValueState& st,
                const Tensor& dv, ValueGrads&) const override {
    value_ops::grad_scalar(c, c.params->p[kGain], 0, dv, st.emb);
    Tensor de = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
    ops::scale_copy_coef(de, dv, c.store->param(c.params->p[kGain]));
    value_ops::table_lookup_backward(c, de, c.params->table);
  }
};

}  // namespace

const ValuePath& bov_value_path() {
  static const Bov m;
  return m;
}

}  // namespace vt
