// The optimizer's configuration and per-step report, nothing else: the hyperparameters of AdamW
// (embedding, lm_head, value tables, scalars, gains) and Muon (block matrices), the lr/momentum
// schedule and the optional global grad-norm clipping (docs/model.md "Optimizer groups"), and
// the StepStats a step returns. The optimizer itself is DistributedOptimizer
// (optim/distributed_optimizer.h), on any layout; one process runs it on a 1-rank ProcessGrid
// over self_communicator() (there is no separate single-process optimizer).
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

#include "optim/adamw.h"
#include "optim/muon.h"
#include "optim/schedule.h"

namespace vt::optim {

struct OptimizerConfig {
  AdamWConfig adamw;
  MuonConfig muon;
  ScheduleConfig schedule;
  double max_grad_norm = 0.0;  // <= 0: no clipping (the norm is still measured and reported)
  // --optimizer adamw: AdamW (adamw.matrix) also for the block matrices, no Muon at all.
  bool adamw_matrices = false;

  // Does Muon update parameters of group g? (kMatrix, unless adamw_matrices.)
  bool uses_muon(ParamGroup g) const { return !adamw_matrices && muon_handles(g); }

  // The defaults of docs/model.md "Optimizer groups" for a model of width d_model.
  static OptimizerConfig defaults(int64_t d_model);
  // Every hyperparameter, for checkpoints, metrics and test cases.
  nlohmann::json to_json() const;
};

struct StepStats {
  int64_t step = 0;             // the 0-based step index given to step()
  double lr_multiplier = 0.0;   // schedule multiplier applied to every group's peak lr
  double matrix_lr = 0.0;       // the block matrices' lr used (Muon's, or AdamW's under adamw)
  double momentum = 0.0;        // Muon momentum used
  double muon_weight_decay = 0.0;  // Muon weight decay coefficient used (before lr, scale)
  double grad_norm = 0.0;       // global grad norm before clipping
  double clip_scale = 1.0;      // factor applied to the grads (1 when not clipped)
};

}  // namespace vt::optim
