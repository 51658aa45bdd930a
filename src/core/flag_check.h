// The check Flags::parse applies to one flag value (core/flags.h), for values that come from
// elsewhere than the command line (run config files: cli/config_file.h), so that they are refused
// exactly as the flag would be.
#pragma once
#include <string>

#include "absl/status/status.h"
#include "core/flags.h"

namespace vt {

// Whether `value` is a valid value of flag `f`: the error names the flag and the limit
// ("--steps 0: out of range, expected an integer in [1, ...]").
absl::Status check_flag_value(const FlagSpec& f, const std::string& value);

}  // namespace vt
