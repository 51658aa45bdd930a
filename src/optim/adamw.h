// AdamW for every parameter that is not a block matrix (docs/model.md "Optimizer groups"):
// embedding, lm_head, value tables and scalars, each group with its own hyperparameters.
// Bias-corrected, decoupled weight decay, fp32 state. The states exp_avg and exp_avg_sq live in
// flat arenas laid out exactly like the ParamStore (same offsets, so a ZeRO-1 shard of the flat
// grad/param range maps
// to the same range of the states, and checkpoints address them by parameter name).
//
// One step at count t (1-based, incremented before the update), lr = peak_lr * lr_multiplier:
//   p  = p * (1 - lr * wd)                       decoupled decay on the old p, lr of this step
//   m  = b1 * m + (1 - b1) * g
//   v  = b2 * v + (1 - b2) * g^2
//   p  = p - (lr / (1 - b1^t)) * m / (sqrt(v / (1 - b2^t)) + eps)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace vt::optim {

struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;
  double eps = 1e-10;
};

struct AdamWConfig {
  // Peak learning rates as used (any d_model scaling already applied).
  AdamWHyper embedding{0.3, 0.8, 0.995, 0.001};
  AdamWHyper lm_head{0.008, 0.8, 0.96, 0.01};
  AdamWHyper value_table{0.15, 0.8, 0.995, 0.01};
  AdamWHyper scalar{0.5, 0.8, 0.95, 0.0};
  // The block shapes' gains (docs/model.md "Optimizer groups": at the scalar group's 0.5 the
  // skipless shapes stall for tens of steps at 8 layers; docs/results.md).
  AdamWHyper gain{0.01, 0.8, 0.95, 0.0};

  // The defaults of docs/model.md "Optimizer groups": embedding, lm_head and value-table lrs scaled
  // by (d_model / 768)^-0.5, scalars not scaled.
  static AdamWConfig defaults(int64_t d_model);
  // Hyperparameters of a group; VT_CHECK-fails for kMatrix (Muon's group).
  const AdamWHyper& for_group(ParamGroup g) const;
};

// The AdamW update on n contiguous elements at step count t >= 1 (formula at the top of this
// file). Standalone so that a sharded optimizer can apply it to any sub-range.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  double lr, int64_t t);
// The same update as ops::adamw_update arguments (what the backends' adamw_update takes): every
// backend maps them back to exactly the floats adamw_update above uses. VT_CHECK-fails for t < 1.
AdamWStepArgs adamw_step_args(const AdamWHyper& h, double lr, int64_t t);

// Single-process AdamW over a store on any device: the state arenas live on the store's device
// and the step runs through ops::adamw_update (a CPU store computes exactly adamw_update above).
class AdamW {
 public:
  // The store must be finalized and outlive the optimizer.
  AdamW(ParamStore* store, AdamWConfig config);

  // Increments the step count, then updates every non-kMatrix parameter from its gradient with
  // lr = group peak lr * lr_multiplier. Leaves the store's bf16 compute copy alone
  // (the caller refreshes it).
  void step(double lr_multiplier);

  static bool handles(ParamGroup g) { return g != ParamGroup::kMatrix; }
  // Names of the per-parameter states: {"exp_avg", "exp_avg_sq"}.
  static const std::vector<std::string>& state_kinds();
  // View of one state of one parameter (local shape, on the store's device). VT_CHECK-fails for
  // a Muon parameter or an unknown kind.
  Tensor state(const std::string& name, const std::string& kind) const;

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t t) { step_count_ = t; }
  const AdamWConfig& config() const { return config_; }
  // The flat state arenas (ParamStore offsets; elements of Muon parameters stay zero). Host
  // pointers: CPU stores only (they fail for a device store; use state()).
  float* exp_avg_data() const { return exp_avg_.f32(); }
  float* exp_avg_sq_data() const { return exp_avg_sq_.f32(); }

 private:
  ParamStore* store_;
  AdamWConfig config_;
  int64_t step_count_ = 0;
  Tensor exp_avg_;
  Tensor exp_avg_sq_;
};

}  // namespace vt::optim
