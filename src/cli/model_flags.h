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
#include "nlohmann/json.hpp"

namespace vt {

// The flag table entries (with their "model", "values" and "blocks" headings). The choices of
// --value and --block, and the options each mode or shape declares, come from the registries.
std::vector<FlagSpec> model_flag_specs();
// The value modes and block shapes with their one-line help, for a command's --help epilog.
std::string model_choices_help();
// The preset named by --preset with every given override applied; not finalized.
absl::StatusOr<ModelConfig> model_config_from_flags(const Flags& f);

// The model flags that rebuild `cfg` (a finalized config, e.g. a checkpoint's) with its
// vocabulary and reparam seed: a preset, the shape, value mode and block shape, and each option
// whose value differs from what those alone give; flag name -> value (a JSON string, number or
// boolean, as config_file.h writes them). Checked by rebuilding: an error names the config fields
// no flag reproduces (`vtrain ckpt inspect --as-config`).
absl::StatusOr<std::vector<std::pair<std::string, nlohmann::json>>> model_flags_of(
    const ModelConfig& cfg);

}  // namespace vt
