// The registry of value modes (docs/model.md, "Value paths"): the ValueMode key, its name, and
// the ValuePath object that implements it (src/model/values/). Adding a mode: its file under
// values/, one enum entry and one row of the table in value_mode.cc, and its tests.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt {

enum class ValueMode {
  kBaseline,
  kResformerIdentity,
  kResformerConstant,
  kResformerLearnable,
  kResformerPlus,
  kResformerSparse,
  kResformerDense,
  kSvformer,
  kV1,
  kX0v,
  kBov,
  kBovAdd,
  kValueEmbed,
  kNeutreno,
  kResformerHidden,
};

class ValuePath;

const std::vector<ValueMode>& all_value_modes();
const char* value_mode_name(ValueMode m);
absl::StatusOr<ValueMode> parse_value_mode(const std::string& name);
// The object that implements mode m.
const ValuePath& value_path(ValueMode m);

}  // namespace vt
