// The model flags `vtrain train` and `vtrain plan` share: a preset, its shape overrides, the value
// mode and the block shape (docs/design.md "CLI"), and how they turn into a ModelConfig. The
// vocabulary and ModelConfig::finalize are the caller's (train reads the data directory's
// tokenizer, plan takes --vocab).
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/flags.h"
#include "model/config.h"

namespace vt {

// The flag table entries (with their "model", "values" and "blocks" headings). The choices of
// --value and --block, and the options each mode or shape declares, come from the registries.
std::vector<FlagSpec> model_flag_specs();
// The value modes and block shapes with their one-line help, for a command's --help epilog.
std::string model_choices_help();
// The preset named by --preset with every given override applied; not finalized.
absl::StatusOr<ModelConfig> model_config_from_flags(const Flags& f);

}  // namespace vt
