// The value modes of MODEL.md section 2: names, parsing, and the per-mode facts the rest of the
// model asks about (does it read V1, does a target layer keep W_V, does it own a table, ...).
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
};

const std::vector<ValueMode>& all_value_modes();
const char* value_mode_name(ValueMode m);
absl::StatusOr<ValueMode> parse_value_mode(const std::string& name);

// Target layers read layer 0's value V1 (so layer 0 can never be a target).
bool mode_reads_v1(ValueMode m);
// A target layer keeps its own W_V matrix.
bool mode_target_has_wv(ValueMode m);
// Target layers own a per-layer value table (V x Hkv*hd).
bool mode_has_table(ValueMode m);
// Earlier layers' context values are needed by later layers (dense keeps all of them).
bool mode_reads_all_values(ValueMode m);
// The mode reads x0 (the normalized embedding) in target layers.
bool mode_reads_x0(ValueMode m);

}  // namespace vt
