// Run config files (docs/usage.md "Config files"): a TOML file whose keys are a command's flags,
// read through the command's own flag table (core/flags.h), so that a key is checked exactly as
// the flag it stands for: `vtrain train --config run.toml`, the command line winning over the
// file. Keys are the flag names without "--", at the top of the file or under the [section] of
// the flag's heading in --help ("non-finite values" is [non-finite-values], "blocks
// (docs/model.md)" [blocks]):
//
//   data = "/data/fineweb"
//   [schedule]
//   steps = 2000
//   matrix-lr = 0.02
//   polar-express = true
//
// A number flag takes a TOML integer or float, an integer flag an integer, a switch a boolean
// (false: not set), a text or choice flag a string, a list flag an array of strings. A file that
// does not parse, an unknown section or key, a value of another TOML type or one the flag refuses
// is refused naming the file, the line and the key. The writer (config_text) is what `vtrain
// ckpt inspect --as-config` prints.
#pragma once
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/flags.h"
#include "nlohmann/json.hpp"

namespace vt {

// The section a flag heading's flags are under: its title up to " (", spaces as '-'.
std::string config_section(const std::string& heading_title);

// The flag names `args` gives ("--name" and "--name=value"; values are not flags).
std::set<std::string> flags_given(const std::vector<std::string>& args);

// The value of --config in `args` ("" when absent).
std::string config_path_in(const std::vector<std::string>& args);

// The flags `path` sets as command-line arguments for `spec` ("--steps", "2000", "--polar-express",
// ...), leaving out the flags in `given` (the command line's, which win).
absl::StatusOr<std::vector<std::string>> config_file_args(const CommandSpec& spec,
                                                          const std::string& path,
                                                          const std::set<std::string>& given);

// A config file setting `values` (flag name -> a JSON string, number, boolean or array of
// strings), each under its section in `spec`'s order, flags not in `values` left out; `header`
// becomes comment lines at the top.
std::string config_text(const CommandSpec& spec,
                        const std::vector<std::pair<std::string, nlohmann::json>>& values,
                        const std::string& header);

}  // namespace vt
