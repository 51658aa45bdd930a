// Evaluation: mean validation loss (nats) and bits per byte (docs/model.md "Metrics") over a fixed
// prefix of the validation split, and text sampling (temperature, top-k) over the KV cache.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "pipeline/pipeline.h"
#include "parallel/process_grid.h"

namespace vt {

struct EvalResult {
  double loss = 0.0;  // mean nats per target token
  double bpb = 0.0;   // bits per UTF-8 byte of the targets
  int64_t tokens = 0;          // target tokens evaluated
  int64_t planned_tokens = 0;  // target tokens the evaluation was to read
  // False when a stop signal ended the pass early: the numbers cover only part of the split
  // and must not be recorded as the evaluation.
  bool complete() const { return tokens == planned_tokens; }
};

// Evaluates on up to `max_tokens` tokens of the `val` split of `data_dir`, read from its start
// in whole global batches of micro_batch x dp rows, through the pipeline engine (any layout;
// every rank calls it; the result is the same on every rank). `token_bytes[id]` is the UTF-8
// length of each token (0: special).
absl::StatusOr<EvalResult> evaluate(PipelineEngine& engine, const ProcessGrid& grid,
                                    const std::string& data_dir, int micro_batch,
                                    int64_t max_tokens, const std::vector<int32_t>& token_bytes,
                                    const std::string& size_flag = "--eval-tokens");

struct SampleOptions {
  int max_tokens = 64;
  double temperature = 0.8;  // 0: greedy
  int top_k = 40;            // 0: whole vocabulary
  uint64_t seed = 0;
};

// Continues `prompt` ids; returns only the new ids. Also reports the cache size per token.
std::vector<int32_t> sample(const GPT& model, const std::vector<int32_t>& prompt,
                            const SampleOptions& opts, int64_t* kv_bytes_per_token = nullptr,
                            int64_t* baseline_kv_bytes_per_token = nullptr);

}  // namespace vt
