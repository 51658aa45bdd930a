// The CORE score of a model (DCLM's CORE as nanochat computes it, nanochat/core_eval.py): per task
// the accuracy over its examples (multiple_choice / schema: the row whose scored tokens have the
// lowest mean cross-entropy is the answer; language_modeling: right when the greedy prediction of
// every continuation token is that token), centered against the task's random baseline
// ((acc - b/100) / (1 - b/100)), and CORE = the mean centered accuracy over the tasks.
// Runs the model's own forward (any dp x tp x pp layout, CPU or device): example i of a task goes
// to data-parallel replica i % dp, whose tp x pp ranks run it as one micro-batch of its rows,
// padded with <|bos|> to a multiple of 64 tokens (causal attention: padding after a row never
// changes its scores); the correct counts are summed over the replicas. Every rank calls it and
// gets the same result.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "eval/core_bundle.h"
#include "model/gpt.h"
#include "parallel/process_grid.h"

namespace vt::eval {

struct CoreTaskResult {
  std::string label;
  int64_t examples = 0;
  double accuracy = 0.0, centered = 0.0;
};

struct CoreResult {
  std::vector<CoreTaskResult> tasks;
  double core = 0.0;  // mean centered accuracy
};

// `progress` (rank 0 only, may be empty) gets one line per task.
absl::StatusOr<CoreResult> evaluate_core(const GPT& model, const ProcessGrid& grid,
                                         const std::vector<CoreTask>& tasks,
                                         const data::Tokenizer& tok,
                                         const std::function<void(const std::string&)>& progress = {});

}  // namespace vt::eval
