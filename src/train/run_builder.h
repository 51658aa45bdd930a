// The objects of one training run and the phases that build them (docs/design.md, "Training
// loop"): the batch and layout checks, the device and the process grid, the model and its memory
// check, the data (training shards, validation split, CORE bundle), the optimizer and the
// checkpoint directory. The Trainer (trainer.h) holds a Run and steps it; what a run resumes
// from and the step loop's own state are the Trainer's. Every phase is collective: errors are
// agreed by every rank, and nothing is written to --ckpt-dir before they pass.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/arena.h"
#include "core/communicator.h"
#include "data/batch_source.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "eval/core_bundle.h"
#include "model/gpt.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "parallel/process_grid.h"
#include "pipeline/pipeline.h"
#include "train/checkpoint_writer.h"
#include "train/device_setup.h"
#include "train/nonfinite.h"
#include "train/options.h"
#include "train/run_state.h"

namespace vt {

struct Run {
  Communicator* world = nullptr;
  bool rank0 = false;
  GridShape shape;
  int micro_batches = 1;        // M: micro-batches per step and data-parallel rank
  int64_t rows_per_micro = 0;   // rows of one micro-batch over all data-parallel ranks
  DevicePlan device;
  std::unique_ptr<ProcessGrid> grid;
  std::string comm_desc;        // the communicators, for the banner
  std::vector<std::pair<int, int>> chunks;  // this rank's layer ranges (vpp of them)
  ParamStore store;
  std::unique_ptr<GPT> model;
  std::unique_ptr<PipelineEngine> engine;
  std::unique_ptr<optim::DistributedOptimizer> opt;
  std::unique_ptr<optim::OverlappedGradSync> dp_sync;
  std::unique_ptr<data::BatchSource> train;  // one directory or a mixture
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::vector<int32_t> token_bytes;
  std::vector<eval::CoreTask> core_tasks;
  CheckpointDirLock lock;
  std::unique_ptr<CheckpointWriter> writer;  // null without --ckpt-dir
  std::string memory_line;        // the memory estimate of this rank, for the banner
  std::string data_fingerprint;   // of --data (data/data_fingerprint.h), saved in checkpoints
  FaultInjection inject;          // VTRAIN_INJECT_* test hooks
  double peak_flops = 1, flops_per_token = 0;  // MFU's denominator and numerator per token
};

// Builds every rank's Run, in the phases above. `o` is completed in place: a --global-batch of 0
// becomes one micro-batch of every data-parallel rank.
absl::StatusOr<std::unique_ptr<Run>> build_run(TrainOptions& o, Communicator* world);

// The training batches of `o.data`: its one directory, or its mixture (data/mixture.h), at the
// start of the stream.
absl::StatusOr<std::unique_ptr<data::BatchSource>> open_train_source(const TrainOptions& o);

}  // namespace vt
