// AdamW over the non-matrix parameter groups: hyperparameters, the elementwise update and the
// flat state arenas.
#include "optim/adamw.h"

#include <cmath>

#include "core/check.h"
#include "core/ops.h"
#include "core/optim_math.h"

namespace vt::optim {

AdamWConfig AdamWConfig::defaults(int64_t d_model) {
  VT_CHECK_MSG(d_model > 0, "d_model must be positive, got " << d_model);
  AdamWConfig c;
  const double s = std::pow(static_cast<double>(d_model) / 768.0, -0.5);
  c.embedding.lr *= s;
  c.lm_head.lr *= s;
  c.value_table.lr *= s;
  return c;
}

const AdamWHyper& AdamWConfig::for_group(ParamGroup g) const {
  switch (g) {
    case ParamGroup::kEmbedding: return embedding;
    case ParamGroup::kLmHead: return lm_head;
    case ParamGroup::kValueTable: return value_table;
    case ParamGroup::kScalar: return scalar;
    case ParamGroup::kGain: return gain;
    case ParamGroup::kSmear: return smear;
    case ParamGroup::kCoefMain: return coef_main;
    case ParamGroup::kCoefSkip: return coef_skip;
    case ParamGroup::kCoefModel: return coef_model;
    case ParamGroup::kMatrix:
      if (matrix.lr > 0.0) return matrix;
      break;
  }
  VT_CHECK_MSG(false, "AdamW has no hyperparameters for group " << param_group_name(g));
  return scalar;  // unreachable
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  double lr, int64_t t) {
  cpu::adamw_update(p, g, m, v, n, adamw_step_args(h, lr, t));
}

AdamWStepArgs adamw_step_args(const AdamWHyper& h, double lr, int64_t t) {
  VT_CHECK_MSG(t >= 1, "AdamW step count must be >= 1, got " << t);
  AdamWStepArgs a;
  a.lr = lr;
  a.beta1 = h.beta1;
  a.beta2 = h.beta2;
  a.weight_decay = h.weight_decay;
  a.eps = h.eps;
  a.t = t;
  return a;
}

const std::vector<std::string>& adamw_state_kinds() {
  static const std::vector<std::string> kinds = {"exp_avg", "exp_avg_sq"};
  return kinds;
}

}  // namespace vt::optim
