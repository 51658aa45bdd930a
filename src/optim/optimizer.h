// The optimizer the trainer drives: AdamW (embedding, lm_head, value tables, scalars) and Muon
// (block matrices) over one ParamStore, with the lr/momentum schedules and optional global
// grad-norm clipping (docs/model.md "Optimizer groups"). One call per training step, after the
// gradients of the whole global batch are in the store's grad arena. Runs on the store's device
// (states on that device, every update through ops); the trainer uses DistributedOptimizer.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/arena.h"
#include "core/tensor.h"
#include "optim/adamw.h"
#include "optim/muon.h"
#include "optim/schedule.h"

namespace vt::optim {

struct OptimizerConfig {
  AdamWConfig adamw;
  MuonConfig muon;
  ScheduleConfig schedule;
  double max_grad_norm = 0.0;  // <= 0: no clipping (the norm is still measured and reported)

  // The defaults of docs/model.md "Optimizer groups" for a model of width d_model.
  static OptimizerConfig defaults(int64_t d_model);
  // Every hyperparameter, for checkpoints, metrics and test cases.
  nlohmann::json to_json() const;
};

struct StepStats {
  int64_t step = 0;             // the 0-based step index given to step()
  double lr_multiplier = 0.0;   // schedule multiplier applied to every group's peak lr
  double matrix_lr = 0.0;       // Muon lr used (peak * multiplier)
  double momentum = 0.0;        // Muon momentum used
  double grad_norm = 0.0;       // global grad norm before clipping
  double clip_scale = 1.0;      // factor applied to the grads (1 when not clipped)
};

class Optimizer {
 public:
  // The store must be finalized and outlive the optimizer.
  Optimizer(ParamStore* store, OptimizerConfig config);

  // Applies one update at 0-based step `step_index` of `total_steps`: measures the global grad
  // norm (or takes `global_grad_norm` when the caller already reduced it across processes),
  // clips the grads in place if configured, then steps AdamW and Muon with the scheduled lr
  // multiplier and momentum, and refreshes the store's compute copy. Does not zero the grads.
  StepStats step(int64_t step_index, int64_t total_steps,
                 std::optional<double> global_grad_norm = std::nullopt);

  // Optimizer states by parameter name: AdamW parameters have "exp_avg", "exp_avg_sq"; Muon
  // parameters "momentum_buffer". Views into the state arenas (local shape, on the store's
  // device), writable (for loading checkpoints).
  const std::vector<std::string>& state_kinds(const std::string& name) const;
  Tensor state(const std::string& name, const std::string& kind) const;

  // Number of updates applied so far (AdamW's bias-correction count). Restored from checkpoints.
  int64_t step_count() const { return adamw_.step_count(); }
  void set_step_count(int64_t t);

  const OptimizerConfig& config() const { return config_; }
  AdamW& adamw() { return adamw_; }
  Muon& muon() { return muon_; }

 private:
  ParamStore* store_;
  OptimizerConfig config_;
  AdamW adamw_;
  Muon muon_;
};

}  // namespace vt::optim
