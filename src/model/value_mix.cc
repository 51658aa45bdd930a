// Forward value mixing per mode (see value_mix.h).
#include "model/value_mix.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_kernels.h"

namespace vt {

std::vector<double> resformer_plus_coefficients(const ModelConfig& cfg, const float* logits,
                                                int64_t n) {
  double mx = -1e300, sum = 0.0;
  for (int64_t k = 0; k < n; ++k) mx = std::max(mx, static_cast<double>(logits[k]));
  std::vector<double> coef(n);
  for (int64_t k = 0; k < n; ++k) sum += (coef[k] = std::exp(logits[k] - mx));
  for (auto& c : coef) c = cfg.n_layer * c / sum;
  return coef;
}

void value_mix_forward(const ModelConfig& cfg, const LayerParams& lp, const ParamStore& store,
                       int layer, const ValueSources& src, int64_t N, int kv_heads, float* v,
                       float* gate_out) {
  const int hd = cfg.head_dim;
  const int64_t K = static_cast<int64_t>(kv_heads) * hd, n = N * K;
  auto sc = [&](int idx) { return store.param(idx).f32()[0]; };
  auto mix2 = [&](float a, const float* x, float b, const float* y) {
    for (int64_t t = 0; t < n; ++t) v[t] = a * x[t] + b * y[t];
  };
  auto scale = [&](float a, const float* x) {
    for (int64_t t = 0; t < n; ++t) v[t] = a * x[t];
  };
  switch (cfg.value_mode) {
    case ValueMode::kBaseline: scale(1.0f, src.ctx); break;
    case ValueMode::kResformerIdentity: mix2(0.5f, src.v1, 0.5f, src.ctx); break;
    case ValueMode::kResformerConstant: mix2(2.0f, src.v1, 1.0f, src.ctx); break;
    case ValueMode::kResformerSparse: mix2(5.0f, src.v1, 1.0f, src.ctx); break;
    case ValueMode::kResformerLearnable: mix2(sc(lp.lambda1), src.v1, sc(lp.lambda2), src.ctx); break;
    case ValueMode::kResformerPlus:
      mix2(static_cast<float>(src.plus_coef), src.v1, sc(lp.lambda2), src.ctx);
      break;
    case ValueMode::kResformerDense: {
      const float* l = store.param(lp.dense).f32();
      scale(l[layer], src.ctx);
      for (int j = 0; j < layer; ++j)
        for (int64_t t = 0; t < n; ++t) v[t] += l[j] * src.values[j][t];
      break;
    }
    case ValueMode::kSvformer: scale(1.0f, src.v1); break;
    case ValueMode::kV1: scale(sc(lp.gain), src.v1); break;
    case ValueMode::kX0v: scale(sc(lp.gain), src.ctx); break;
    case ValueMode::kBov: scale(sc(lp.gain), src.emb); break;
    case ValueMode::kBovAdd: {
      const float a = lp.a >= 0 ? sc(lp.a) : 0.5f;
      const float b = lp.b >= 0 ? sc(lp.b) : 0.5f;
      mix2(a, src.ctx, b, src.emb);
      break;
    }
    case ValueMode::kValueEmbed: {
      // gate (N, kv_heads) = scale * sigmoid(gate_in[:, :Gc] W_g)
      const int Gc = cfg.value_embed_gate_channels;
      cpu::gemm<float>(false, false, N, kv_heads, Gc, 1.0f, src.gate_in, src.gate_ld,
                       store.param(lp.gate_w).f32(), kv_heads, 0.0f, gate_out, kv_heads);
      const float gs = cfg.value_embed_gate_scale;
      for (int64_t t = 0; t < N * kv_heads; ++t) gate_out[t] = gs / (1.0f + std::exp(-gate_out[t]));
      for (int64_t r = 0; r < N; ++r)
        for (int h = 0; h < kv_heads; ++h) {
          const float g = gate_out[r * kv_heads + h];
          for (int d = 0; d < hd; ++d) {
            const int64_t o = (r * kv_heads + h) * hd + d;
            v[o] = src.ctx[o] + g * src.emb[o];
          }
        }
      break;
    }
  }
}

}  // namespace vt
