// Forward value mixing per mode (see value_mix.h), written with device ops so it runs on any
// backend.
#include "model/value_mix.h"

#include <algorithm>
#include <cmath>

#include "core/ops.h"

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
                       int layer, const ValueSources& src, int64_t N, int kv_heads,
                       const Tensor& v, const Tensor& gate_out) {
  // Scalars are read to the host (one small copy each on a device).
  auto sc = [&](int idx) { return static_cast<float>(store.param(idx).item()); };
  auto mix2 = [&](float a, const Tensor& x, float b, const Tensor& y) {
    ops::scale_copy(v, x, a);
    ops::axpy(v, y, b);
  };
  switch (cfg.value_mode) {
    case ValueMode::kBaseline: ops::copy(v, src.ctx); break;
    case ValueMode::kResformerIdentity: mix2(0.5f, src.v1, 0.5f, src.ctx); break;
    case ValueMode::kResformerConstant: mix2(2.0f, src.v1, 1.0f, src.ctx); break;
    case ValueMode::kResformerSparse: mix2(5.0f, src.v1, 1.0f, src.ctx); break;
    case ValueMode::kResformerLearnable: mix2(sc(lp.lambda1), src.v1, sc(lp.lambda2), src.ctx); break;
    case ValueMode::kResformerPlus:
      mix2(static_cast<float>(src.plus_coef), src.v1, sc(lp.lambda2), src.ctx);
      break;
    case ValueMode::kResformerDense: {
      const std::vector<float> l = store.param(lp.dense).to_host_f32();
      ops::scale_copy(v, src.ctx, l[layer]);
      for (int j = 0; j < layer; ++j) ops::axpy(v, src.values[j], l[j]);
      break;
    }
    case ValueMode::kSvformer: ops::copy(v, src.v1); break;
    case ValueMode::kV1: ops::scale_copy(v, src.v1, sc(lp.gain)); break;
    case ValueMode::kX0v: ops::scale_copy(v, src.ctx, sc(lp.gain)); break;
    case ValueMode::kBov: ops::scale_copy(v, src.emb, sc(lp.gain)); break;
    case ValueMode::kBovAdd: {
      const float a = lp.a >= 0 ? sc(lp.a) : 0.5f;
      const float b = lp.b >= 0 ? sc(lp.b) : 0.5f;
      mix2(a, src.ctx, b, src.emb);
      break;
    }
    case ValueMode::kValueEmbed: {
      // gate (N, kv_heads) = scale * sigmoid(gate_in[:, :Gc] W_g)
      GemmArgs g;
      g.M = N, g.N = kv_heads, g.K = cfg.value_embed_gate_channels;
      g.A = src.gate_in, g.lda = src.gate_in.dim(-1);
      g.B = store.compute_param(lp.gate_w), g.ldb = kv_heads;
      g.C = gate_out, g.ldc = kv_heads;
      ops::gemm(g);
      ops::gate_sigmoid(gate_out, cfg.value_embed_gate_scale);
      ops::gated_mix(src.ctx, src.emb, gate_out, v);
      break;
    }
  }
}

}  // namespace vt
