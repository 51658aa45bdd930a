// AdamW for every parameter that is not a block matrix (docs/model.md "Optimizer groups"):
// embedding, lm_head, value tables and scalars, each group with its own hyperparameters.
// Bias-corrected, decoupled weight decay, fp32 state (exp_avg, exp_avg_sq: DistributedOptimizer
// keeps them per ZeRO-1 chunk; checkpoints address them by parameter name). This file holds the
// hyperparameters and the update; the optimizer that applies it is distributed_optimizer.h.
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
#include "core/optim_math.h"
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
  // The block matrices, under --optimizer adamw only (OptimizerConfig::adamw_matrices); lr 0
  // (unused) otherwise.
  AdamWHyper matrix{0.0, 0.9, 0.999, 0.0};
  // The smear gate (--smear-gate on): nanochat's own group, lr 0.2 not scaled with the width
  // (gpt_base.py setup_optimizer).
  AdamWHyper smear{0.2, 0.8, 0.95, 0.0};
  // The coefficient groups (ParamGroup::kCoef*), as the papers' official code trains them at
  // vtrain's default lrs (docs/model.md "Optimizer groups"; the run's lrs: train/optimizer_setup.h):
  // the BoV authors' alpha group, lr scalar_lr * 0.01, betas (0.8, 0.95), wd 0.05, and beta
  // group, lr scalar_lr, betas (0.96, 0.95), wd 0 (RiddleHe/nanochat research/bank_of_values
  // nanochat/model/gpt_base.py setup_optimizer, lines 1003 and 1005); the model's weights'
  // AdamW settings for ResFormer's and DenseFormer's (lr: Muon's matrix lr; betas (0.9, 0.95),
  // eps 1e-8 as Zcchill/Value-Residual-Learning scripts/run_llama_resformer_82M.sh and
  // epfml/DenseFormer experiments/config/base.py give every weight).
  AdamWHyper coef_main{0.005, 0.8, 0.95, 0.05};
  AdamWHyper coef_skip{0.5, 0.96, 0.95, 0.0};
  AdamWHyper coef_model{0.02, 0.9, 0.95, 0.0, 1e-8};

  // The defaults of docs/model.md "Optimizer groups": embedding, lm_head and value-table lrs scaled
  // by (d_model / 768)^-0.5, scalars not scaled.
  static AdamWConfig defaults(int64_t d_model);
  // Hyperparameters of a group; VT_CHECK-fails for kMatrix unless matrix.lr > 0 (--optimizer
  // adamw).
  const AdamWHyper& for_group(ParamGroup g) const;
};

// The AdamW update on n contiguous elements at step count t >= 1 (formula at the top of this
// file). Standalone so that a sharded optimizer can apply it to any sub-range; the loop itself is
// core's (vt::cpu::adamw_update, core/optim_math.h), which the CPU backend runs too.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  double lr, int64_t t);
// The same update as ops::adamw_update arguments (what the backends' adamw_update takes): every
// backend maps them back to exactly the floats adamw_update above uses. VT_CHECK-fails for t < 1.
AdamWStepArgs adamw_step_args(const AdamWHyper& h, double lr, int64_t t);

// AdamW's parameters under --optimizer muon: every group but kMatrix (Muon's). Under
// --optimizer adamw AdamW has every parameter (OptimizerConfig::uses_muon).
inline bool adamw_handles(ParamGroup g) { return g != ParamGroup::kMatrix; }
// Names of its per-parameter states, as checkpoints store them: {"exp_avg", "exp_avg_sq"}.
const std::vector<std::string>& adamw_state_kinds();

}  // namespace vt::optim
