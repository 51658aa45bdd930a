// AdamW over the non-matrix parameter groups: hyperparameters, the elementwise update and the
// flat state arenas.
#include "optim/adamw.h"

#include <cmath>

#include "core/check.h"
#include "core/ops.h"

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
    case ParamGroup::kMatrix: break;
  }
  VT_CHECK_MSG(false, "AdamW has no hyperparameters for group " << param_group_name(g));
  return scalar;  // unreachable
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  double lr, int64_t t) {
  VT_CHECK_MSG(t >= 1, "AdamW step count must be >= 1, got " << t);
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
  const float decay = static_cast<float>(1.0 - lr * h.weight_decay);
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_bc2 = static_cast<float>(1.0 / bc2);
  const float b1 = static_cast<float>(h.beta1), omb1 = static_cast<float>(1.0 - h.beta1);
  const float b2 = static_cast<float>(h.beta2), omb2 = static_cast<float>(1.0 - h.beta2);
  const float eps = static_cast<float>(h.eps);
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi * inv_bc2) + eps);
  }
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
