// The flags of `vtrain train` (docs/design.md "CLI"): the table --help renders, and their parsing
// into TrainOptions: a preset, then explicit overrides (cli/model_flags.h), then the vocabulary
// of the data directory.
#pragma once
#include <string>

#include "absl/status/statusor.h"
#include "core/flags.h"
#include "train/options.h"

namespace vt {

const CommandSpec& train_command();
std::string train_usage();
// Parses `vtrain train` flags; reads the data dir's vocabulary size.
absl::StatusOr<TrainOptions> parse_train_options(int argc, char** argv, int first);

}  // namespace vt
