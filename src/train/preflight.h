// Checks a training run makes before step 1, so that what can be known up front never surfaces
// after hours of training: the memory the layout needs against what the host (or the device)
// has free, the validation split against one evaluation batch and the vocabulary, and every
// token id of the training shards against the vocabulary. Each returns an error agreed by every
// rank, naming the cause and what to change.
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/communicator.h"
#include "core/tensor.h"
#include "data/loader.h"
#include "parallel/process_grid.h"
#include "plan/memory_estimate.h"
#include "train/options.h"

namespace vt {

// Collective over `world`. The estimate of every rank against the memory it draws from: the
// device's free memory for a CUDA device, else the host's available memory shared by the ranks
// of that host; o.memory_limit_gib (--memory-limit-gib) replaces the measured figure. A refusal
// names the need and the pool, prints the planner's breakdown of the rank that needs the most
// (plan/plan.h format_breakdown) and the layouts of the same world size that fit (the planner's
// enumeration, suggest_layouts, each with the flags to pass and its need per rank).
// o.skip_memory_check (--skip-memory-check) turns a refusal into a warning. `shape` and `stage`
// are this rank's grid and pipeline stage; o.global_batch must be filled in.
absl::Status check_memory_fits(const MemoryEstimate& estimate, const TrainOptions& o,
                               const GridShape& shape, int stage, Device device, DType act_dtype,
                               Communicator* world);

// Micro-batches of `micro_batch` rows x dp an evaluation of at most `max_tokens` reads from a
// validation split of `val_tokens` tokens (never wrapping around it), or an error saying the
// split is too small for one. `size_flag` is the flag that set max_tokens (named in the error with
// the minimum it needs).
absl::StatusOr<int> eval_micro_batches(const std::string& data_dir, int64_t val_tokens, int64_t T,
                                       int micro_batch, int dp, int64_t max_tokens,
                                       const std::string& size_flag = "--eval-tokens");

// Collective. The validation split exists, holds one evaluation batch, and the tokens an
// evaluation of `max_tokens` reads are inside the vocabulary (file and offset named otherwise).
absl::Status check_eval_split(const std::string& data_dir, int64_t vocab_size, int64_t T,
                              int micro_batch, int dp, int64_t max_tokens, Communicator* world,
                              const std::string& size_flag = "--eval-tokens");

// Collective. Every token of the training shards is inside the vocabulary: the shards are
// scanned in parallel, shard i by world rank i % size, with OpenMP threads.
absl::Status check_train_ids(const data::BatchSource& train, Communicator* world);

}  // namespace vt
