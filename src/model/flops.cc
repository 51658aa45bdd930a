// FLOPs accounting (see flops.h).
#include "model/flops.h"

#include <algorithm>

#include "core/arena.h"
#include "model/gpt.h"

namespace vt {

int64_t matmul_params(const ModelConfig& cfg) {
  // Every Muon matrix of the registered model is a matmul weight (W_Q, W_K, W_V, W_O, W_fc,
  // W_proj, value-embed gates, the dW of reparameterized projections, whose effective matrix
  // is multiplied); identity projections and tables are not. Plus W_lm over the real vocabulary.
  ParamStore store;  // registration only: no memory
  GPT model(cfg);
  model.register_params(store);
  int64_t n = 0;
  for (const ParamInfo& p : store.infos())
    if (p.group == ParamGroup::kMatrix) n += shape_numel(p.global_shape);
  n += static_cast<int64_t>(cfg.n_embd) * cfg.vocab_size;  // lm_head over the real vocabulary
  return n;
}

double flops_per_token(const ModelConfig& cfg) {
  double attn = 0;
  for (int i = 0; i < cfg.n_layer; ++i)
    attn += 12.0 * cfg.n_head * cfg.head_dim * std::min(cfg.layer_window(i), cfg.seq_len);
  return 6.0 * static_cast<double>(matmul_params(cfg)) + attn;
}

}  // namespace vt
