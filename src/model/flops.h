// FLOPs per token for MFU (docs/model.md, "Metrics"): 6 x (matmul parameters a token passes through)
// + 12 x H x hd x (attended context) summed over layers, with sliding windows counted by their
// window; table lookups count nothing (BoV target layers have no W_V FLOPs).
#pragma once
#include <cstdint>

#include "model/config.h"

namespace vt {

double flops_per_token(const ModelConfig& cfg);
// Matmul parameters seen per token (block matrices, value gates, lm_head; not wte or tables).
int64_t matmul_params(const ModelConfig& cfg);

}  // namespace vt
