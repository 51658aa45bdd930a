// Decoder: one-token-at-a-time forward pass over a mode-aware KV cache.
#include "model/decode.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_kernels.h"
#include "model/value_mix.h"

namespace vt {

Decoder::Decoder(const GPT& model, int max_len)
    : model_(model), cfg_(model.config()), max_len_(std::min(max_len, model.config().seq_len)) {
  VT_CHECK_MSG(model.is_first_stage() && model.is_last_stage() && model.parallel().tp_size() == 1,
               "Decoder runs a whole model on one process");
  K_ = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  keys_.assign(cfg_.n_layer, std::vector<float>(max_len_ * K_));
  values_.resize(cfg_.n_layer);
  for (int i = 0; i < cfg_.n_layer; ++i)
    if (caches_values(i)) values_[i].assign(max_len_ * K_, 0.0f);
  keeps_ids_ = cfg_.value_mode == ValueMode::kBov && !cfg_.target_layers.empty();
  if (cfg_.value_mode == ValueMode::kResformerPlus) {
    const Tensor logits = model_.store()->param("value_plus.logits");
    plus_coef_ = resformer_plus_coefficients(cfg_, logits.f32(), logits.numel());
  }
}

bool Decoder::caches_values(int layer) const {
  if (!cfg_.is_target(layer)) return true;
  switch (cfg_.value_mode) {
    case ValueMode::kSvformer:
    case ValueMode::kV1:
    case ValueMode::kBov:
      return false;
    default:
      return true;
  }
}

int64_t Decoder::kv_bytes_per_token() const {
  int64_t bytes = 0;
  for (int i = 0; i < cfg_.n_layer; ++i) bytes += K_ * 4 * (caches_values(i) ? 2 : 1);
  if (keeps_ids_) bytes += 4;
  return bytes;
}

int64_t Decoder::baseline_kv_bytes_per_token() const { return cfg_.n_layer * K_ * 4 * 2; }

const float* Decoder::value_row(int i, int s, float* scratch) const {
  if (caches_values(i)) return values_[i].data() + s * K_;
  const LayerParams& lp = model_.layer_params(i);
  const float gain = lp.gain >= 0 ? model_.store()->param(lp.gain).f32()[0] : 1.0f;
  const float* src = nullptr;
  if (cfg_.value_mode == ValueMode::kBov)
    src = model_.store()->param(lp.table).f32() + static_cast<int64_t>(ids_[s]) * K_;
  else
    src = values_[0].data() + s * K_;  // svformer, v1: layer 0's value
  for (int64_t t = 0; t < K_; ++t) scratch[t] = gain * src[t];
  return scratch;
}

std::vector<float> Decoder::step(int32_t token) {
  VT_CHECK_MSG(pos_ < max_len_, "decoder cache is full (" << max_len_ << " tokens)");
  VT_CHECK_MSG(token >= 0 && token < cfg_.vocab_size, "token id " << token << " outside the vocabulary");
  const ParamStore& store = *model_.store();
  const int C = cfg_.n_embd, H = cfg_.n_head, Hkv = cfg_.n_kv_head, hd = cfg_.head_dim;
  const int t = pos_;
  const float eps = cfg_.norm_eps;
  if (keeps_ids_) ids_.push_back(token);

  std::vector<float> x(C), x0(C), rstd(1), n1(C), q(H * hd), k(K_), ctx(K_), emb(K_), v(K_),
      gate(Hkv), y(H * hd), o(C), h(cfg_.mlp_hidden()), scratch(K_);
  const float* wte = store.param("wte").f32();
  cpu::rmsnorm_forward<float>(wte + static_cast<int64_t>(token) * C, x.data(), rstd.data(), 1, C,
                              1.0f, eps);
  x0 = x;
  std::vector<std::vector<float>> ctx_values(cfg_.n_layer);
  for (int i = 0; i < cfg_.n_layer; ++i) {
    const LayerParams& lp = model_.layer_params(i);
    auto W = [&](int idx) { return store.param(idx).f32(); };
    cpu::rmsnorm_forward<float>(x.data(), n1.data(), rstd.data(), 1, C, 1.0f, eps);
    cpu::gemm<float>(false, false, 1, H * hd, C, 1.0f, n1.data(), C, W(lp.wq), H * hd, 0.0f,
                     q.data(), H * hd);
    cpu::gemm<float>(false, false, 1, K_, C, 1.0f, n1.data(), C, W(lp.wk), K_, 0.0f, k.data(), K_);
    cpu::rope_forward<float>(q.data(), q.data(), 1, 1, H, hd, cfg_.rope_base, t);
    cpu::rope_forward<float>(k.data(), k.data(), 1, 1, Hkv, hd, cfg_.rope_base, t);
    std::vector<float> r(std::max(H, Hkv));
    cpu::rmsnorm_forward<float>(q.data(), q.data(), r.data(), H, hd, cfg_.qk_norm_scale, eps);
    cpu::rmsnorm_forward<float>(k.data(), k.data(), r.data(), Hkv, hd, cfg_.qk_norm_scale, eps);
    std::copy(k.begin(), k.end(), keys_[i].begin() + t * K_);

    // This token's value.
    const bool target = cfg_.is_target(i);
    if (lp.wv >= 0) {
      const float* src = (target && cfg_.value_mode == ValueMode::kX0v) ? x0.data() : n1.data();
      cpu::gemm<float>(false, false, 1, K_, C, 1.0f, src, C, W(lp.wv), K_, 0.0f, ctx.data(), K_);
      if (model_.keeps_value(i)) ctx_values[i] = ctx;
    }
    if (target && mode_has_table(cfg_.value_mode))
      cpu::embedding_forward<float>(W(lp.table), 0, cfg_.vocab_padded, K_, &token, 1, emb.data());
    if (!target) {
      v = ctx;
    } else {
      auto row = [&](std::vector<float>& r) { return Tensor::view(r.data(), {1, K_}); };
      ValueSources src;
      if (mode_reads_v1(cfg_.value_mode)) src.v1 = row(ctx_values[0]);
      src.ctx = row(ctx);
      src.emb = row(emb);
      src.gate_in = Tensor::view(n1.data(), {1, C});
      if (mode_reads_all_values(cfg_.value_mode))
        for (int j = 0; j < i; ++j)
          src.values.push_back(ctx_values[j].empty() ? Tensor() : row(ctx_values[j]));
      if (!plus_coef_.empty()) src.plus_coef = plus_coef_[cfg_.target_index(i)];
      value_mix_forward(cfg_, lp, store, i, src, 1, Hkv, row(v), Tensor::view(gate.data(), {1, Hkv}));
    }
    if (caches_values(i)) std::copy(v.begin(), v.end(), values_[i].begin() + t * K_);

    // Attention of this query over the cached window.
    const int window = cfg_.layer_window(i);
    const int s0 = std::max(0, t - window + 1);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> p(t - s0 + 1);
    std::fill(y.begin(), y.end(), 0.0f);
    for (int hh = 0; hh < H; ++hh) {
      const int g = hh / (H / Hkv);
      const float* qh = q.data() + hh * hd;
      float mx = -1e30f;
      for (int s = s0; s <= t; ++s) {
        const float* ks = keys_[i].data() + s * K_ + g * hd;
        float dot = 0;
        for (int d = 0; d < hd; ++d) dot += qh[d] * ks[d];
        p[s - s0] = dot * scale;
        mx = std::max(mx, p[s - s0]);
      }
      double sum = 0;
      for (auto& e : p) sum += (e = std::exp(e - mx));
      float* yh = y.data() + hh * hd;
      for (int s = s0; s <= t; ++s) {
        const float* vs = value_row(i, s, scratch.data()) + g * hd;
        const float w = static_cast<float>(p[s - s0] / sum);
        for (int d = 0; d < hd; ++d) yh[d] += w * vs[d];
      }
    }
    cpu::gemm<float>(false, false, 1, C, H * hd, 1.0f, y.data(), H * hd, W(lp.wo), C, 0.0f,
                     o.data(), C);
    for (int c = 0; c < C; ++c) x[c] += o[c];
    // MLP.
    cpu::rmsnorm_forward<float>(x.data(), n1.data(), rstd.data(), 1, C, 1.0f, eps);
    const int hid = cfg_.mlp_hidden();
    cpu::gemm<float>(false, false, 1, hid, C, 1.0f, n1.data(), C, W(lp.fc), hid, 0.0f, h.data(), hid);
    cpu::relu2_forward<float>(h.data(), h.data(), hid);
    cpu::gemm<float>(false, false, 1, C, hid, 1.0f, h.data(), hid, W(lp.proj), C, 0.0f, o.data(), C);
    for (int c = 0; c < C; ++c) x[c] += o[c];
  }
  cpu::rmsnorm_forward<float>(x.data(), n1.data(), rstd.data(), 1, C, 1.0f, eps);
  std::vector<float> logits(cfg_.vocab_padded);
  cpu::gemm<float>(false, false, 1, cfg_.vocab_padded, C, 1.0f, n1.data(), C,
                   store.param("lm_head").f32(), cfg_.vocab_padded, 0.0f, logits.data(),
                   cfg_.vocab_padded);
  logits.resize(cfg_.vocab_size);
  const float cap = cfg_.logit_softcap;
  for (auto& l : logits) l = cap * std::tanh(l / cap);
  ++pos_;
  return logits;
}

}  // namespace vt
