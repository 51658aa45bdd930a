// FLOPs accounting (see flops.h).
#include "model/flops.h"

#include <algorithm>

namespace vt {

int64_t matmul_params(const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd;
  int64_t n = 0;
  for (int i = 0; i < cfg.n_layer; ++i) {
    n += C * cfg.q_dim() + C * cfg.kv_dim() + cfg.q_dim() * C;  // wq, wk, wo
    if (cfg.layer_has_wv(i)) n += C * cfg.kv_dim();
    n += 2 * C * cfg.mlp_hidden();
    if (cfg.is_target(i) && cfg.value_mode == ValueMode::kValueEmbed)
      n += static_cast<int64_t>(cfg.value_embed_gate_channels) * cfg.n_kv_head;
  }
  n += C * cfg.vocab_size;  // lm_head over the real vocabulary
  return n;
}

double flops_per_token(const ModelConfig& cfg) {
  double attn = 0;
  for (int i = 0; i < cfg.n_layer; ++i)
    attn += 12.0 * cfg.n_head * cfg.head_dim * std::min(cfg.layer_window(i), cfg.seq_len);
  return 6.0 * static_cast<double>(matmul_params(cfg)) + attn;
}

}  // namespace vt
