// DenseFormer's connectivity and weights (see dense.h).
#include "model/dense.h"

#include "model/param_registrar.h"

namespace vt::dense {

bool has_average(const ModelConfig& cfg, int block) {
  return cfg.dense && (block + 1) % cfg.dense_period == 0;
}

std::vector<int> inputs(const ModelConfig& cfg, int block) {
  std::vector<int> s;
  if (!has_average(cfg, block)) return s;
  for (int j = 0; j <= block + 1; ++j)
    if ((block + 1 - j) % cfg.dense_dilation == 0) s.push_back(j);
  return s;
}

bool read_from(const ModelConfig& cfg, int j, int first_block) {
  if (!cfg.dense) return false;
  for (int i = std::max(first_block, j - 1); i < cfg.n_layer; ++i)
    if (has_average(cfg, i) && (i + 1 - j) % cfg.dense_dilation == 0) return true;
  return false;
}

int register_weights(ParamRegistrar& r, int block) {
  const std::vector<int> s = inputs(r.config(), block);
  if (s.empty()) return -1;
  const int n = static_cast<int>(s.size());
  return r.coef("blocks." + std::to_string(block) + ".dwa", n,
                InitRule::make([n](uint64_t) {
                  std::vector<float> a(n, 0.0f);
                  a.back() = 1.0f;
                  return a;
                }),
                block, ParamGroup::kCoefModel);
}

}  // namespace vt::dense
