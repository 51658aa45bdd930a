// The optimizer's hyperparameters from the run's options (docs/model.md "Optimizer groups"):
// every group's peak lr (with --lr-scale and --lr-batch-scale), the coefficient groups under
// --coef-optim, --optimizer adamw's single AdamW, Muon's weight decay. run_builder.cc applies it;
// the tests read it without building a run.
#pragma once
#include "optim/optimizer.h"
#include "train/options.h"

namespace vt {

// nanochat's learning-rate correction for the batch (RiddleHe/nanochat research/bank_of_values
// scripts/base_train.py lines 290-297: sqrt(B / 2^19), B the tokens per optimizer step) under
// --lr-batch-scale nanochat; 1 under none. `global_batch` must be resolved (> 0).
double lr_batch_scale(const TrainOptions& o);

// The optimizer configuration of a run whose options have been vetted (parse_train_options) and
// whose global batch is resolved (o.global_batch > 0 when lr_batch_scale or muon_wd_scale is
// nanochat).
optim::OptimizerConfig optimizer_config(const TrainOptions& o);

}  // namespace vt
