// The model flags `vtrain train` and `vtrain plan` share: a preset, its shape overrides, the value
// mode and the block shape (docs/design.md "CLI"), and how they turn into a ModelConfig. The
// vocabulary and ModelConfig::finalize are the caller's (train reads the data directory's
// tokenizer, plan takes --vocab).
#pragma once
#include <vector>

#include "absl/status/statusor.h"
#include "core/flags.h"
#include "model/config.h"

namespace vt {

// The flag table entries (with their "model", "values" and "blocks" headings).
std::vector<FlagSpec> model_flag_specs();
// The preset named by --preset with every given override applied; not finalized.
absl::StatusOr<ModelConfig> model_config_from_flags(const Flags& f);

}  // namespace vt
