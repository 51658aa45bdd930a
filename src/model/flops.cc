// FLOPs accounting (see flops.h).
#include "model/flops.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

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

namespace {
// nanochat's num_scaling_params: transformer matrices + lm_head (padded vocabulary).
int64_t scaling_params(const ModelConfig& cfg) {
  return matmul_params(cfg) + static_cast<int64_t>(cfg.n_embd) * (cfg.vocab_padded - cfg.vocab_size);
}
}  // namespace

absl::StatusOr<double> nanochat_wd_scale(const ModelConfig& cfg, int64_t batch_tokens) {
  ModelConfig ref = cfg;
  ref.n_layer = 12;
  ref.n_embd = 768;
  ref.head_dim = 128;
  ref.n_head = 6;
  ref.n_kv_head = 6;
  ref.target_layers.clear();
  if (absl::Status st = ref.finalize(); !st.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--muon-wd-scale nanochat needs this model's d12 counterpart (its reference "
                     "horizon), which is not a valid model: ", st.message()));
  return std::sqrt(static_cast<double>(batch_tokens) / 524288.0) *
         static_cast<double>(scaling_params(ref)) / static_cast<double>(scaling_params(cfg));
}

double flops_per_token(const ModelConfig& cfg) {
  double attn = 0;
  for (int i = 0; i < cfg.n_layer; ++i)
    attn += 12.0 * cfg.n_head * cfg.head_dim * std::min(cfg.layer_window(i), cfg.seq_len);
  return 6.0 * static_cast<double>(matmul_params(cfg)) + attn;
}

}  // namespace vt
