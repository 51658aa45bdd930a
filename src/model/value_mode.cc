// The value-mode registry (see value_mode.h): one row per mode.
#include "model/value_mode.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "model/value_path.h"

namespace vt {

// Defined in src/model/values/*.cc.
const ValuePath& baseline_value_path();
const ValuePath& resformer_identity_value_path();
const ValuePath& resformer_constant_value_path();
const ValuePath& resformer_learnable_value_path();
const ValuePath& resformer_plus_value_path();
const ValuePath& resformer_sparse_value_path();
const ValuePath& resformer_dense_value_path();
const ValuePath& svformer_value_path();
const ValuePath& v1_value_path();
const ValuePath& x0v_value_path();
const ValuePath& bov_value_path();
const ValuePath& bov_add_value_path();
const ValuePath& value_embed_value_path();
const ValuePath& neutreno_value_path();
const ValuePath& resformer_hidden_value_path();

namespace {
struct ModeEntry {
  ValueMode mode;
  const ValuePath& (*path)();
};
const ModeEntry kModes[] = {
    {ValueMode::kBaseline, baseline_value_path},
    {ValueMode::kResformerIdentity, resformer_identity_value_path},
    {ValueMode::kResformerConstant, resformer_constant_value_path},
    {ValueMode::kResformerLearnable, resformer_learnable_value_path},
    {ValueMode::kResformerPlus, resformer_plus_value_path},
    {ValueMode::kResformerSparse, resformer_sparse_value_path},
    {ValueMode::kResformerDense, resformer_dense_value_path},
    {ValueMode::kSvformer, svformer_value_path},
    {ValueMode::kV1, v1_value_path},
    {ValueMode::kX0v, x0v_value_path},
    {ValueMode::kBov, bov_value_path},
    {ValueMode::kBovAdd, bov_add_value_path},
    {ValueMode::kValueEmbed, value_embed_value_path},
    {ValueMode::kNeutreno, neutreno_value_path},
    {ValueMode::kResformerHidden, resformer_hidden_value_path},
};
}  // namespace

const std::vector<ValueMode>& all_value_modes() {
  static const std::vector<ValueMode> modes = [] {
    std::vector<ValueMode> v;
    for (const auto& e : kModes) v.push_back(e.mode);
    return v;
  }();
  return modes;
}

const ValuePath& value_path(ValueMode m) {
  for (const auto& e : kModes)
    if (e.mode == m) return e.path();
  VT_CHECK_MSG(false, "value mode " << static_cast<int>(m) << " is not registered");
  return baseline_value_path();
}

const char* value_mode_name(ValueMode m) { return value_path(m).name(); }

absl::StatusOr<ValueMode> parse_value_mode(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& e : kModes) {
    if (name == e.path().name()) return e.mode;
    names.push_back(e.path().name());
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown value mode '", name,
                                                 "'; choose one of: ", absl::StrJoin(names, ", ")));
}

}  // namespace vt
