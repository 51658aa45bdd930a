// FLOPs per token for MFU (docs/model.md, "Metrics"): 6 x (matmul parameters a token passes through)
// + 12 x H x hd x (attended context) summed over layers, with sliding windows counted by their
// window; table lookups count nothing (BoV target layers have no W_V FLOPs).
#pragma once
#include <cstdint>

#include "absl/status/statusor.h"
#include "model/config.h"

namespace vt {

double flops_per_token(const ModelConfig& cfg);
// Matmul parameters seen per token (block matrices, value gates, lm_head; not wte or tables).
int64_t matmul_params(const ModelConfig& cfg);

// nanochat's Muon weight-decay scaling (scripts/base_train.py, "weight_decay_scaled"):
//   wd = wd_ref * sqrt(B / 2^19) * (D_ref / D)
// where B is the tokens per step and D the run's token horizon, ratio * P, with P nanochat's
// "scaling params" (the block matrices plus lm_head over the padded vocabulary) and D_ref the
// same for the d12 model (nanochat's build_model_meta(12): width 768, 6 heads of 128, n_kv_head =
// n_head) of this config's vocabulary, sequence length, block shape and value mode. The ratio
// cancels: the factor is sqrt(B / 2^19) * P(d12) / P(cfg). Returns that factor; an error when the
// d12 counterpart of the config is not a valid model (e.g. an explicit layer list past 12).
absl::StatusOr<double> nanochat_wd_scale(const ModelConfig& cfg, int64_t batch_tokens);

}  // namespace vt
