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
  // Learned scalars are read on the device (ops::*_coef): no host round trip inside a step.
  auto P = [&](int idx) { return store.param(idx); };
  switch (cfg.value_mode) {
    case ValueMode::kBaseline: ops::copy(v, src.ctx); break;
    case ValueMode::kResformerIdentity:
      ops::scale_copy(v, src.v1, 0.5f);
      ops::axpy(v, src.ctx, 0.5f);
      break;
    case ValueMode::kResformerConstant:
      ops::scale_copy(v, src.v1, 2.0f);
      ops::axpy(v, src.ctx, 1.0f);
      break;
    case ValueMode::kResformerSparse:
      ops::scale_copy(v, src.v1, 5.0f);
      ops::axpy(v, src.ctx, 1.0f);
      break;
    case ValueMode::kResformerLearnable:
      ops::scale_copy_coef(v, src.v1, P(lp.lambda1));
      ops::axpy_coef(v, src.ctx, P(lp.lambda2));
      break;
    case ValueMode::kResformerPlus:
      ops::scale_copy(v, src.v1, static_cast<float>(src.plus_coef));
      ops::axpy_coef(v, src.ctx, P(lp.lambda2));
      break;
    case ValueMode::kResformerDense:
      ops::scale_copy_coef(v, src.ctx, P(lp.dense), layer);
      for (int j = 0; j < layer; ++j) ops::axpy_coef(v, src.values[j], P(lp.dense), j);
      break;
    case ValueMode::kSvformer: ops::copy(v, src.v1); break;
    case ValueMode::kV1: ops::scale_copy_coef(v, src.v1, P(lp.gain)); break;
    case ValueMode::kX0v: ops::scale_copy_coef(v, src.ctx, P(lp.gain)); break;
    case ValueMode::kBov: ops::scale_copy_coef(v, src.emb, P(lp.gain)); break;
    case ValueMode::kBovAdd:
      if (lp.a >= 0) {
        ops::scale_copy_coef(v, src.ctx, P(lp.a));
        ops::axpy_coef(v, src.emb, P(lp.b));
      } else {
        ops::scale_copy(v, src.ctx, 0.5f);
        ops::axpy(v, src.emb, 0.5f);
      }
      break;
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
