// Value-mode names and properties.
#include "model/value_mode.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vt {

namespace {
struct ModeEntry {
  ValueMode mode;
  const char* name;
};
const ModeEntry kModes[] = {
    {ValueMode::kBaseline, "baseline"},
    {ValueMode::kResformerIdentity, "resformer-identity"},
    {ValueMode::kResformerConstant, "resformer-constant"},
    {ValueMode::kResformerLearnable, "resformer-learnable"},
    {ValueMode::kResformerPlus, "resformer-plus"},
    {ValueMode::kResformerSparse, "resformer-sparse"},
    {ValueMode::kResformerDense, "resformer-dense"},
    {ValueMode::kSvformer, "svformer"},
    {ValueMode::kV1, "v1"},
    {ValueMode::kX0v, "x0v"},
    {ValueMode::kBov, "bov"},
    {ValueMode::kBovAdd, "bov-add"},
    {ValueMode::kValueEmbed, "value-embed"},
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

const char* value_mode_name(ValueMode m) {
  for (const auto& e : kModes)
    if (e.mode == m) return e.name;
  return "?";
}

absl::StatusOr<ValueMode> parse_value_mode(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& e : kModes) {
    if (name == e.name) return e.mode;
    names.push_back(e.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown value mode '", name,
                                                 "'; choose one of: ", absl::StrJoin(names, ", ")));
}

bool mode_reads_v1(ValueMode m) {
  switch (m) {
    case ValueMode::kResformerIdentity:
    case ValueMode::kResformerConstant:
    case ValueMode::kResformerLearnable:
    case ValueMode::kResformerPlus:
    case ValueMode::kResformerSparse:
    case ValueMode::kResformerDense:
    case ValueMode::kSvformer:
    case ValueMode::kV1:
      return true;
    default:
      return false;
  }
}

bool mode_target_has_wv(ValueMode m) {
  return !(m == ValueMode::kSvformer || m == ValueMode::kV1 || m == ValueMode::kBov);
}

bool mode_has_table(ValueMode m) {
  return m == ValueMode::kBov || m == ValueMode::kBovAdd || m == ValueMode::kValueEmbed;
}

bool mode_reads_all_values(ValueMode m) { return m == ValueMode::kResformerDense; }

bool mode_reads_x0(ValueMode m) { return m == ValueMode::kX0v; }

}  // namespace vt
