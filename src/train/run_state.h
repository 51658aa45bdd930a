// The state of a training run on disk: which checkpoint a run resumes from (--resume), the
// exclusive lock on --ckpt-dir, and the collective save/load of everything a run needs to
// continue (parameters, optimizer states, loader position, step, tokens). Used by the trainer
// for its periodic, final and stop-request saves.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "core/arena.h"
#include "optim/distributed_optimizer.h"
#include "parallel/process_grid.h"
#include "train/options.h"

namespace vt {

// Resolves --resume to a checkpoint path, or "" to start fresh. `auto` takes the newest
// checkpoint of --ckpt-dir that verifies (a corrupt newest one falls back to the previous).
// Collective over the grid.
absl::StatusOr<std::string> resume_path(const TrainOptions& o, const ProcessGrid& grid);

// Rank 0 holds an exclusive flock on <ckpt_dir>/.vtrain.lock for the whole run, so two runs
// never write one checkpoint directory at once; the kernel drops it when the process ends.
// Collective; the error is agreed. The returned object releases the lock when destroyed.
class CheckpointDirLock {
 public:
  static absl::StatusOr<CheckpointDirLock> acquire(const std::string& dir, const ProcessGrid& grid);
  CheckpointDirLock() = default;
  CheckpointDirLock(CheckpointDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  CheckpointDirLock& operator=(CheckpointDirLock&& o) noexcept;
  ~CheckpointDirLock();

 private:
  int fd_ = -1;
};

// Optimizer states as tensors of each parameter's local shape, host memory (ZeRO shards
// gathered over DP: a collective, called by every rank in the same order).
std::vector<NamedTensor> gather_optimizer_states(const ParamStore& store,
                                                 optim::DistributedOptimizer& opt);
// The same into `into`: its tensors are reused when it holds these states already (the buffers
// of the previous checkpoint's snapshot), else it is rebuilt.
void gather_optimizer_states(const ParamStore& store, optim::DistributedOptimizer& opt,
                             std::vector<NamedTensor>& into);

// Collective: fills the store (any device) and the optimizer from `path`; returns its meta.
absl::StatusOr<CheckpointMeta> load_training_state(const std::string& path, const ModelConfig& cfg,
                                                   ParamStore& store,
                                                   optim::DistributedOptimizer& opt,
                                                   const ProcessGrid& grid);

}  // namespace vt
