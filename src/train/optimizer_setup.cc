// The run's optimizer configuration from its options (optimizer_setup.h).
#include "train/optimizer_setup.h"

#include <cmath>

#include "core/check.h"
#include "model/flops.h"

namespace vt {

double lr_batch_scale(const TrainOptions& o) {
  if (o.lr_batch_scale != NanochatScale::kNanochat) return 1.0;
  VT_CHECK_MSG(o.global_batch > 0, "--lr-batch-scale nanochat needs the resolved global batch");
  return std::sqrt(static_cast<double>(o.global_batch) / 524288.0);
}

optim::OptimizerConfig optimizer_config(const TrainOptions& o) {
  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(o.model.n_embd);
  // base_train.py passes matrix_lr, embedding_lr, unembedding_lr and scalar_lr times the batch
  // factor to setup_optimizer (lines 311-318); gpt_base.py's setup_optimizer derives the value
  // tables' lr from embedding_lr (line 1014) and the coefficient groups' from scalar_lr (lines
  // 1003, 1005), and keeps the smear gate's 0.2 as a constant (line 997): so the factor reaches
  // every group but the smear gate's (and vtrain's own gain group, which gpt_base has not).
  const double b = lr_batch_scale(o);
  oc.muon.lr = o.matrix_lr * o.lr_scale * b;
  oc.adamw.scalar.lr = o.scalar_lr * b;
  oc.adamw.gain.lr = o.gain_lr;
  for (optim::AdamWHyper* h : {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table})
    h->lr *= b;
  if (o.coef_optim == CoefOptim::kVtrain) {
    // vtrain's earlier setting: every coefficient in the scalar group (--scalar-lr, (0.8, 0.95),
    // no decay).
    oc.adamw.coef_main = oc.adamw.coef_skip = oc.adamw.coef_model = oc.adamw.scalar;
  } else {
    oc.adamw.coef_main.lr = 0.01 * o.scalar_lr * b;  // gpt_base.py line 1003
    oc.adamw.coef_skip.lr = o.scalar_lr * b;         // gpt_base.py line 1005
    oc.adamw.coef_model.lr = o.matrix_lr * b;        // the lr of the model's weights
  }
  for (optim::AdamWHyper* h :
       {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table, &oc.adamw.scalar,
        &oc.adamw.gain, &oc.adamw.smear, &oc.adamw.coef_main, &oc.adamw.coef_skip,
        &oc.adamw.coef_model})
    h->lr *= o.lr_scale;
  if (o.optimizer == OptimizerKind::kAdamW) {
    // One AdamW for every parameter (the official SAS code's: HF AdamW, betas (0.9, 0.999),
    // eps 1e-8; no weight decay on gains; our scalars and coefficients, which it has none of,
    // likewise).
    oc.adamw_matrices = true;
    const double lr = o.adamw_lr * o.lr_scale;
    for (optim::AdamWHyper* h : {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table,
                                 &oc.adamw.matrix})
      *h = {lr, 0.9, 0.999, o.weight_decay, 1e-8};
    for (optim::AdamWHyper* h : {&oc.adamw.scalar, &oc.adamw.gain, &oc.adamw.smear,
                                 &oc.adamw.coef_main, &oc.adamw.coef_skip, &oc.adamw.coef_model})
      *h = {lr, 0.9, 0.999, 0.0, 1e-8};
  }
  oc.schedule.warmup_steps = o.warmup_steps;
  oc.schedule.warmdown_frac = o.warmdown_frac;
  oc.schedule.final_lr_frac = o.final_lr_frac;
  oc.max_grad_norm = o.max_grad_norm;
  if (o.polar_express) oc.muon.ns = optim::NsKind::kPolarExpress;
  oc.muon.weight_decay = o.muon_wd;
  if (o.muon_wd_scale == NanochatScale::kNanochat) {
    // parse_train_options and check_batch have vetted the config and the batch.
    auto scale = nanochat_wd_scale(o.model, o.global_batch);
    VT_CHECK_MSG(scale.ok(), scale.status().message());
    oc.muon.weight_decay *= *scale;
  }
  oc.muon.wd_style = o.muon_wd_style;
  oc.schedule.momentum_schedule = o.muon_momentum;
  oc.muon.ns_dtype = o.muon_ns_dtype;
  return oc;
}

}  // namespace vt
