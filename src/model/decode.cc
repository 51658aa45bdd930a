// Decoder: one-token-at-a-time forward pass over a mode-aware KV cache, through DecodeKit (the
// BlockKit of decoding).
#include "model/decode.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_kernels.h"
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/dense.h"
#include "model/layer_attention.h"
#include "model/projection.h"
#include "model/smear_gate.h"

namespace vt {

namespace {
Tensor zeros(Shape s) { return Tensor::zeros(std::move(s)); }
}  // namespace

// The sub-layers for one token at position `t` of layer `layer`.
class DecodeKit final : public BlockKit {
 public:
  DecodeKit(Decoder& d, int layer, int t) : d_(d), layer_(layer), t_(t) {}
  int layer() const override { return layer_; }
  const ModelConfig& config() const override { return d_.cfg_; }
  const LayerParams& params() const override { return d_.model_.layer_params(layer_); }

  Tensor norm(const Tensor& x, NormActs& s) const override {
    if (!s.on) return x;
    Tensor n = zeros({1, d_.cfg_.n_embd}), rstd = zeros({1});
    ops::rmsnorm(x, n, rstd, 1.0f, d_.cfg_.norm_eps);
    return n;
  }
  Tensor attention(const Tensor& n, BlockActs& a) const override;
  Tensor mlp(const Tensor& n, BlockActs&) const override {
    const LayerParams& lp = params();
    const ParamStore& st = *d_.model_.store();
    Tensor h = zeros({1, d_.cfg_.mlp_hidden()});
    ops::matmul(n, st.param(lp.fc), h);
    if (d_.cfg_.mlp_act == "relu")
      ops::relu(h, h);
    else
      ops::relu2(h, h);
    Tensor out = zeros({1, d_.cfg_.n_embd});
    ops::matmul(h, st.param(lp.proj), out);
    return out;
  }
  void scale(const Tensor& y, int gain) const override {
    ops::scale_copy_coef(y, y, d_.model_.store()->param(gain));
  }
  Tensor clone(const Tensor& x) const override { return x.clone(); }
  Tensor add_norm(Tensor& x, const Tensor& delta, NormActs& s) const override {
    if (!s.on) {
      ops::axpy(x, delta);
      return x.clone();
    }
    Tensor n = zeros({1, d_.cfg_.n_embd}), rstd = zeros({1});
    ops::add_rmsnorm(x, delta, Tensor(), n, rstd, 1.0f, d_.cfg_.norm_eps);
    return n;
  }

  void residual_add(Tensor& x, const Tensor& delta) const override { ops::axpy(x, delta); }

  void norm_backward(const NormActs&, const Tensor&, const Tensor&) const override { no_bwd(); }
  void norm_backward_sum(const NormActs&, const Tensor&, const Tensor&,
                         const Tensor&) const override {
    no_bwd();
  }
  Tensor attention_backward(const Tensor&, BlockActs&) const override { return no_bwd(); }
  Tensor mlp_backward(const Tensor&, BlockActs&) const override { return no_bwd(); }
  void gain_grad(int, const Tensor&, const Tensor&) const override { no_bwd(); }

 private:
  static Tensor no_bwd() {
    VT_CHECK_MSG(false, "the decoder has no backward");
    return Tensor();
  }

  Decoder& d_;
  int layer_, t_;
};

Tensor DecodeKit::attention(const Tensor& n_block, BlockActs&) const {
  const ModelConfig& cfg = d_.cfg_;
  const GPT& model = d_.model_;
  const ParamStore& st = *model.store();
  const LayerParams& lp = params();
  const int i = layer_, t = t_;
  const int H = cfg.n_head, Hkv = cfg.n_kv_head, hd = cfg.head_dim;
  const int64_t K = d_.K_;
  // A mode mixing x0 into the attention input (resformer-hidden): q, k, v read the mix.
  Tensor n = n_block;
  if (const float hx = cfg.is_target(i) ? cfg.value().attention_input_x0_coef() : 0.0f;
      hx != 0.0f) {
    n = zeros(n_block.shape());
    ops::scale_copy(n, n_block, 1.0f - hx);
    ops::axpy(n, d_.x0_.reshaped(n_block.shape()), hx);
  }
  Tensor q = zeros({1, 1, H, hd}), k = zeros({1, 1, Hkv, hd});
  ops::matmul(n, st.param(lp.wq), q);
  ops::matmul(n, st.param(lp.wk), k);
  // RoPE at position t, then QK-norm: one fused op in place, as training's attention core.
  if (cfg.use_qk_norm()) {
    Tensor rq = zeros({H}), rk = zeros({Hkv});
    ops::rope_rmsnorm(q, q, rq, cfg.rope_base, cfg.qk_norm_scale, cfg.norm_eps, t);
    ops::rope_rmsnorm(k, k, rk, cfg.rope_base, cfg.qk_norm_scale, cfg.norm_eps, t);
  } else {
    ops::rope(q, q, cfg.rope_base, t);
    ops::rope(k, k, cfg.rope_base, t);
  }
  std::copy(k.f32(), k.f32() + K, d_.keys_[i].begin() + t * K);

  // This token's value.
  const ValuePath& vp = cfg.value();
  const bool target = cfg.is_target(i);
  Tensor ctx, v = zeros({1, K});
  if (lp.v.defined()) {
    ctx = zeros({1, K});
    Tensor src = (target && vp.context_from_x0()) ? d_.x0_ : n;
    if (target && cfg.value_renorms_x0()) {
      // x0v under the smear gate reads norm(x0), as training does (ModelConfig::value_renorms_x0).
      Tensor x0n = zeros({1, cfg.n_embd}), rstd = zeros({1});
      ops::rmsnorm(d_.x0_.reshaped({1, cfg.n_embd}), x0n, rstd, 1.0f, cfg.norm_eps);
      src = x0n;
    }
    projection::forward_in(model, lp.v, src, ctx);
    if (model.keeps_value(i)) d_.ctx_values_[i] = ctx;
  }
  if (!target) {
    ops::copy(v, ctx);
  } else {
    const ValueLayerCtx c = model.value_ctx(i, 1, Tensor::from_host(&d_.token_, {1}, Device::kCPU),
                                            &d_.value_coef_, nullptr);
    ValueState state;
    vp.forward(c, gather_value_sources(vp, i, K, n, ctx, d_.ctx_values_), state, v);
  }
  if (d_.caches_values(i)) std::copy(v.f32(), v.f32() + K, d_.values_[i].begin() + t * K);

  // Softmax attention of this query over the cached window (with the --attn-bias bias).
  const int window = cfg.layer_window(i);
  const int s0 = std::max(0, t - window + 1), S = t - s0 + 1;
  std::vector<float> vwin(S * K);  // the window's value rows, this token's last
  for (int s = s0; s <= t; ++s) d_.value_row(i, s, vwin.data() + (s - s0) * K);
  const ops::AttnExtras ex =
      layer_attention_extras(cfg, st, lp, i, d_.bias_[i], d_.rowscale_[i], d_.ctx_values_,
                             v.shape());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* bias =
      ex.bias.defined() ? ex.bias.f32() + static_cast<int64_t>(t) * d_.bias_T_ : nullptr;
  const int64_t qd = int64_t{H} * hd;
  std::vector<float> p(S), soft(ex.mix.active() ? S * qd : qd, 0.0f);
  float* yp = soft.data() + (ex.mix.active() ? (S - 1) * qd : 0);  // this token's row
  const float* qp = q.f32();
  for (int hh = 0; hh < H; ++hh) {
    const int g = hh / (H / Hkv);
    const float* qh = qp + hh * hd;
    float mx = -1e30f;
    for (int s = s0; s <= t; ++s) {
      const float* ks = d_.keys_[i].data() + s * K + g * hd;
      float dot = 0;
      for (int e = 0; e < hd; ++e) dot += qh[e] * ks[e];
      p[s - s0] = dot * scale + (bias ? bias[s] : 0.0f);
      mx = std::max(mx, p[s - s0]);
    }
    double sum = 0;
    for (auto& e : p) sum += (e = std::exp(e - mx));
    float* yh = yp + hh * hd;
    for (int s = 0; s < S; ++s) {
      const float* vs = vwin.data() + s * K + g * hd;
      const float w = static_cast<float>(p[s] / sum);
      for (int e = 0; e < hd; ++e) yh[e] += w * vs[e];
    }
  }
  // The layer's additions (shaped gains, the value mode's term) by the mix training runs, over
  // the window's rows: the last row's running mean is this token's (earlier rows are unused).
  Tensor y = zeros({1, qd});
  if (!ex.mix.active()) {
    std::copy(soft.begin(), soft.end(), y.f32());
  } else {
    std::vector<float> v1win(ex.mix.lam != 0.0f ? S * K : 0, 0.0f), out(S * qd);
    if (!v1win.empty()) std::copy(ex.mix.v1.f32(), ex.mix.v1.f32() + K, v1win.end() - K);
    auto gain = [](const Tensor& g) { return g.defined() ? g.f32() : nullptr; };
    cpu::AttnShape shape;
    shape.T = S, shape.H = H, shape.Hkv = Hkv, shape.hd = hd, shape.window = S;
    // E-SPA/U-SPA: this row's rowscale, and the centring term softmax(bias row) v per KV head
    // (the zero-query attention the training op computes), in the window's last row.
    std::vector<float> rowscale(ex.mix.rowscale.defined() ? S : 0, 1.0f);
    if (!rowscale.empty()) rowscale.back() = ex.mix.rowscale.f32()[t];
    std::vector<float> centre(ex.mix.centre_on_bias ? S * K : 0, 0.0f);
    if (!centre.empty()) {
      float mx = -1e30f;
      for (int s = s0; s <= t; ++s) mx = std::max(mx, bias[s]);
      double sum = 0;
      for (int s = s0; s <= t; ++s) sum += (p[s - s0] = std::exp(bias[s] - mx));
      float* cr = centre.data() + (S - 1) * K;
      for (int s = 0; s < S; ++s) {
        const float w = static_cast<float>(p[s] / sum);
        for (int64_t e = 0; e < K; ++e) cr[e] += w * vwin[s * K + e];
      }
    }
    cpu::MixSpa<float> spa;
    spa.rowscale = rowscale.empty() ? nullptr : rowscale.data();
    spa.centre = centre.empty() ? nullptr : centre.data();
    cpu::attention_mix_forward<float>(soft.data(), vwin.data(),
                                      v1win.empty() ? nullptr : v1win.data(), gain(ex.mix.alpha),
                                      gain(ex.mix.beta), gain(ex.mix.gamma), ex.mix.lam,
                                      out.data(), shape, spa);
    std::copy(out.end() - qd, out.end(), y.f32());
  }
  Tensor o = zeros({1, cfg.n_embd});
  projection::forward_out(model, lp.o, y, o);
  return o;
}

Decoder::Decoder(const GPT& model, int max_len)
    : model_(model), cfg_(model.config()), max_len_(std::min(max_len, model.config().seq_len)) {
  VT_CHECK_MSG(model.is_first_stage() && model.is_last_stage() && model.parallel().tp_size() == 1,
               "Decoder runs a whole model on one process");
  VT_CHECK_MSG(model.device() == Device::kCPU, "Decoder reads parameters on the CPU");
  K_ = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  keys_.assign(cfg_.n_layer, std::vector<float>(max_len_ * K_));
  values_.resize(cfg_.n_layer);
  for (int i = 0; i < cfg_.n_layer; ++i)
    if (caches_values(i)) values_[i].assign(max_len_ * K_, 0.0f);
  keeps_ids_ = cfg_.value().cache_keeps_ids() && !cfg_.target_layers.empty();
  bias_.resize(cfg_.n_layer);
  bias_T_ = cfg_.seq_len;
  rowscale_.resize(cfg_.n_layer);
  for (int i = 0; i < cfg_.n_layer; ++i) {
    bias_[i] = model_.attention_bias(i);
    rowscale_[i] = model_.attention_rowscale(i);
  }
  if (!cfg_.target_layers.empty())
    cfg_.value().begin_pass(cfg_, *model_.store(), model_.value_shared(), value_coef_);
}

bool Decoder::caches_values(int layer) const {
  return !cfg_.is_target(layer) || cfg_.value().caches_values();
}

int64_t Decoder::kv_bytes_per_token() const {
  int64_t bytes = 0;
  for (int i = 0; i < cfg_.n_layer; ++i) bytes += K_ * 4 * (caches_values(i) ? 2 : 1);
  if (keeps_ids_) bytes += 4;
  return bytes;
}

int64_t Decoder::baseline_kv_bytes_per_token() const { return cfg_.n_layer * K_ * 4 * 2; }

void Decoder::value_row(int i, int s, float* out) const {
  if (caches_values(i)) {
    std::copy(values_[i].begin() + s * K_, values_[i].begin() + (s + 1) * K_, out);
    return;
  }
  // Rebuild the row with the value mode from what is cached: V1 at s, the token id at s.
  const ValuePath& vp = cfg_.value();
  int32_t id = keeps_ids_ ? ids_[s] : 0;
  const ValueLayerCtx c =
      model_.value_ctx(i, 1, Tensor::from_host(&id, {1}, Device::kCPU), &value_coef_, nullptr);
  // Only modes without a context value of their own rebuild rows: they read V1 (layer 0 always
  // caches) or the table.
  std::vector<float> v1(values_[0].begin() + s * K_, values_[0].begin() + (s + 1) * K_);
  ValueState state;
  vp.forward(c, gather_value_sources(vp, i, K_, Tensor(), Tensor(), {Tensor::view(v1.data(), {1, K_})}),
             state, Tensor::view(out, {1, K_}));
}

std::vector<float> Decoder::step(int32_t token) {
  VT_CHECK_MSG(pos_ < max_len_, "decoder cache is full (" << max_len_ << " tokens)");
  VT_CHECK_MSG(token >= 0 && token < cfg_.vocab_size, "token id " << token << " outside the vocabulary");
  const ParamStore& store = *model_.store();
  const int C = cfg_.n_embd;
  const int t = pos_;
  token_ = token;
  if (keeps_ids_) ids_.push_back(token);

  Tensor x = zeros({1, C}), rstd = zeros({1});
  const float* wte = store.param("wte").f32();
  ops::rmsnorm(Tensor::view(const_cast<float*>(wte) + static_cast<int64_t>(token) * C, {1, C}),
               x, rstd, 1.0f, cfg_.norm_eps);
  if (model_.smear_params().on()) {
    // The smear gate reads the previous position's normalized embedding (before its smearing).
    std::vector<float> here(x.f32(), x.f32() + C);
    if (t > 0) smear::decode_step(store, model_.smear_params(), x.f32(), prev_emb_.data(), C);
    prev_emb_ = std::move(here);
  }
  x0_ = x.clone();
  ctx_values_.assign(cfg_.n_layer, Tensor());
  const BlockShape& shape = model_.block_shape();
  // DenseFormer: this token's block outputs x_j, averaged after the blocks that have averages.
  std::vector<Tensor> xs(cfg_.dense ? cfg_.n_layer + 1 : 0);
  if (cfg_.dense) xs[0] = x.clone();
  for (int i = 0; i < cfg_.n_layer; ++i) {
    BlockActs a;
    a.x_in = x.clone();
    DecodeKit kit(*this, i, t);
    shape.forward(kit, x, a);
    if (!cfg_.dense) continue;
    xs[i + 1] = x.clone();
    const std::vector<int> s = dense::inputs(cfg_, i);
    if (s.empty()) continue;
    const Tensor w = store.param(model_.layer_params(i).dwa);
    x = zeros({1, C});
    for (size_t k = 0; k < s.size(); ++k) ops::axpy_coef(x, xs[s[k]], w, k);
  }
  Tensor n = zeros({1, C});
  ops::rmsnorm(x, n, rstd, 1.0f, cfg_.norm_eps);
  std::vector<float> logits(cfg_.vocab_padded);
  Tensor lt = Tensor::view(logits.data(), {1, cfg_.vocab_padded});
  ops::matmul(n, store.param("lm_head"), lt);
  logits.resize(cfg_.vocab_size);
  const float cap = cfg_.logit_softcap;
  for (auto& l : logits) l = cap * std::tanh(l / cap);
  ++pos_;
  return logits;
}

}  // namespace vt
