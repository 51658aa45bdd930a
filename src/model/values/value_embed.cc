// Value mode `value-embed` (nanochat / modded-nanogpt style, docs/model.md "Value paths"): on
// alternate layers ending at the last, v = n W_V + 3 sigmoid(n[:, :12] W_g)[kv head] * E_i[id],
// one gate per (token, KV head) broadcast over the head's channels. Parameters:
// blocks.i.value.table (U(-s, s), s = sqrt(3/d)) and blocks.i.value.gate_w (12 x Hkv, U(0, 0.02),
// split with the KV heads over TP; a Muon matrix).
#include <cmath>

#include "core/ops.h"
#include "model/config.h"
#include "model/param_registrar.h"
#include "model/value_path.h"

namespace vt {
namespace {

enum { kGateW };

class ValueEmbed final : public ValuePath {
 public:
  const char* name() const override { return "value-embed"; }
  const char* help() const override {
    return "v = n W_V + gate * E_i[id] on alternate layers (nanochat)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAlternate; }
  bool has_table() const override { return true; }
  absl::Status validate(const ModelConfig& cfg) const override {
    if (cfg.n_embd < cfg.value_embed_gate_channels)
      return absl::InvalidArgumentError(
          "value-embed gates read the first " + std::to_string(cfg.value_embed_gate_channels) +
          " channels; --dim " + std::to_string(cfg.n_embd) + " is too small");
    return absl::OkStatus();
  }
  void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams&,
                      ValueLayerParams& p) const override {
    const ModelConfig& cfg = r.config();
    const std::string b = "blocks." + std::to_string(layer) + ".value.";
    const double s = std::sqrt(3.0 / cfg.n_embd);
    p.table = r.table(b + "table", cfg.kv_dim(), InitRule::uniform(-s, s), layer);
    p.p[kGateW] = r.matrix_cols(b + "gate_w", cfg.value_embed_gate_channels, cfg.n_kv_head,
                                InitRule::uniform(0.0, 0.02), layer);
  }
  void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState& st,
               const Tensor& v) const override {
    const ModelConfig& cfg = *c.cfg;
    st.emb = Tensor::zeros(v.shape(), v.dtype(), v.device());
    value_ops::table_lookup(c, c.params->table, st.emb);
    // gate (N, kv_heads) = scale * sigmoid(gate_in[:, :Gc] W_g)
    st.gate = Tensor::zeros({c.N, c.kv_heads}, DType::kF32, v.device());
    GemmArgs g;
    g.M = c.N, g.N = c.kv_heads, g.K = cfg.value_embed_gate_channels;
    g.A = src.gate_in, g.lda = src.gate_in.dim(-1);
    g.B = c.store->compute_param(c.params->p[kGateW]), g.ldb = c.kv_heads;
    g.C = st.gate, g.ldc = c.kv_heads;
    ops::gemm(g);
    ops::gate_sigmoid(st.gate, cfg.value_embed_gate_scale);
    ops::gated_mix(src.ctx, st.emb, st.gate, v);
  }
  void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState& st,
                const Tensor& dv, ValueGrads& g) const override {
    const ModelConfig& cfg = *c.cfg;
    const int64_t N = c.N, C = src.gate_in.dim(-1);
    const int kvh = c.kv_heads, Gc = cfg.value_embed_gate_channels;
    ops::copy(g.dctx, dv);
    // v = ctx + gate * emb, gate = gs * sigmoid(z), z = n[:, :Gc] W_g.
    Tensor de = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
    Tensor dgate = Tensor::zeros({N, kvh}, DType::kF32, dv.device());
    ops::gated_mix_backward(dv, st.emb, st.gate, de, dgate);
    Tensor dz = Tensor::zeros({N, kvh}, dv.dtype(), dv.device());
    ops::gate_sigmoid_backward(st.gate, dgate, cfg.value_embed_gate_scale, dz);
    // d W_g += n[:, :Gc]^T dz ; d n[:, :Gc] += dz W_g^T
    GemmArgs gw;
    gw.trans_a = true;
    gw.M = Gc, gw.N = kvh, gw.K = N;
    gw.A = src.gate_in, gw.lda = C;
    gw.B = dz, gw.ldb = kvh;
    gw.C = c.store->grad(c.params->p[kGateW]), gw.ldc = kvh;
    gw.beta = 1.0f;
    ops::gemm(gw);
    GemmArgs gx;
    gx.trans_b = true;
    gx.M = N, gx.N = Gc, gx.K = kvh;
    gx.A = dz, gx.lda = kvh;
    gx.B = c.store->compute_param(c.params->p[kGateW]), gx.ldb = kvh;
    gx.C = g.dgate_in, gx.ldc = C;
    gx.beta = 1.0f;
    ops::gemm(gx);
    value_ops::table_lookup_backward(c, de, c.params->table);
  }
};

}  // namespace

const ValuePath& value_embed_value_path() {
  static const ValueEmbed m;
  return m;
}

}  // namespace vt
