// The training loop of `vtrain train`: builds the model and optimizer, streams batches from the
// loader (gradient accumulation up to the global batch), steps, logs metrics and progress,
// evaluates, samples, checkpoints and resumes. Single process today; the distributed engine
// slots in through the model's parallel context.
#pragma once
#include "absl/status/status.h"
#include "core/communicator.h"
#include "train/options.h"

namespace vt {

// Exit code of `vtrain train` after a stop signal (SIGUSR1/SIGTERM) made it save a checkpoint and
// stop early: the run is incomplete and resumes with --resume auto.
inline constexpr int kExitRequeue = 75;

// SIGUSR1/SIGTERM make a running training save at the next step boundary and stop (exit 75).
// Installed first thing in `vtrain train`, before MPI starts, so an early signal is not fatal.
void install_stop_signal_handlers();

// Runs on every rank of `world` (a SelfCommunicator for one process).
absl::Status run_train(const TrainOptions& opts, Communicator* world);

}  // namespace vt
