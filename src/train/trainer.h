// The training loop of `vtrain train`: builds the model and optimizer, streams batches from the
// loader (gradient accumulation up to the global batch), steps, logs metrics and progress,
// evaluates, samples, checkpoints and resumes. Single process today; the distributed engine
// slots in through the model's parallel context.
#pragma once
#include "absl/status/status.h"
#include "parallel/communicator.h"
#include "train/options.h"

namespace vt {

// Runs on every rank of `world` (a SelfCommunicator for one process).
absl::Status run_train(const TrainOptions& opts, Communicator* world);

}  // namespace vt
