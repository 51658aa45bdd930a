// ParamRegistrar (see param_registrar.h).
#include "model/param_registrar.h"

#include "core/check.h"

namespace vt {

int ParamRegistrar::add(const std::string& name, Shape global, ParamGroup group, int split_axis,
                        InitRule init, ParamMeta meta) {
  Shape local = global;
  ParamSplit split;
  if (split_axis >= 0) {
    VT_CHECK_MSG(global[split_axis] % tp_ == 0,
                 name << ": dimension " << global[split_axis] << " does not split over tp " << tp_);
    local[split_axis] = global[split_axis] / tp_;
    split = {split_axis, local[split_axis] * rank_};
  }
  const int idx = store_.add(name, local, group, global, split, meta);
  VT_CHECK(idx == static_cast<int>(rules_.size()));
  rules_.push_back(std::move(init));
  return idx;
}

int ParamRegistrar::coef(const std::string& name, int64_t n, InitRule init, int layer,
                         ParamGroup group, bool pp_replicated) {
  VT_CHECK_MSG(group == ParamGroup::kCoefMain || group == ParamGroup::kCoefSkip ||
                   group == ParamGroup::kCoefModel,
               name << ": a coefficient goes into a coefficient group, not "
                    << param_group_name(group));
  return add(name, {n}, group, -1, std::move(init), {layer, pp_replicated});
}

int ParamRegistrar::gain(const std::string& name, int64_t n, InitRule init, int layer) {
  return add(name, {n}, ParamGroup::kGain, -1, std::move(init), {layer, false});
}

int ParamRegistrar::per_head_gain(const std::string& name, InitRule init, int layer) {
  return add(name, {cfg_.n_head}, ParamGroup::kGain, 0, std::move(init), {layer, false});
}

int ParamRegistrar::matrix_cols(const std::string& name, int64_t rows, int64_t cols,
                                InitRule init, int layer) {
  return add(name, {rows, cols}, ParamGroup::kMatrix, 1, std::move(init), {layer, false});
}

int ParamRegistrar::matrix_rows(const std::string& name, int64_t rows, int64_t cols,
                                InitRule init, int layer) {
  return add(name, {rows, cols}, ParamGroup::kMatrix, 0, std::move(init), {layer, false});
}

int ParamRegistrar::matrix(const std::string& name, int64_t rows, int64_t cols, InitRule init,
                           int layer) {
  return add(name, {rows, cols}, ParamGroup::kMatrix, -1, std::move(init), {layer, false});
}

int ParamRegistrar::table(const std::string& name, int64_t width, InitRule init, int layer,
                          bool pp_replicated) {
  return add(name, {cfg_.vocab_padded, width}, ParamGroup::kValueTable, 0, std::move(init),
             {layer, pp_replicated});
}

}  // namespace vt
