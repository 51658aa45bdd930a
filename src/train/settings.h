// The settings table of `vtrain train` (docs/design.md "CLI", "Settings"): each setting of a run
// declared once, in one row: its flag (name, type, default, range or choices, help: core/flags.h),
// the TrainOptions field it fills, the key it is saved under in the checkpoint's options JSON (if
// saved), and whether a change on resume is noted. Parsing (the command line and a --config
// file), --help, TrainOptions::to_json, the resume-change note and `vtrain ckpt inspect
// --as-config` are generated from it. Enumerated options are spelled here only: the same strings
// on the command line, in a config file and in the saved JSON.
//
// The model's flags (the preset, shape, value mode and block shape) are cli/model_flags.h's (their
// registries); --data and --recipe are cli/train_flags.cc's. Rules that tie several settings
// together (--warmup-frac against --warmup, --optimizer adamw's flags, defaults that depend on
// --device) are parse_train_options's.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "nlohmann/json.hpp"
#include "train/options.h"

namespace vt {

struct TrainSetting {
  FlagSpec flag;  // a heading when flag.name starts with '#'
  // The key in TrainOptions::to_json (the checkpoint's saved options); "" when not saved.
  std::string saved_as;
  // A different value on resume is allowed but said (it changes the run's course: the batch,
  // the data order, the schedule); Trainer::note_changed_options.
  bool noted_on_resume = false;
  // Set: the flag applies only under this --optimizer (parse_train_options refuses it with the
  // other one; --as-config leaves it out).
  std::optional<OptimizerKind> only_with;
  // Fills the field from the parsed flags (nullptr: no field of its own; parse_train_options
  // reads it).
  std::function<void(const Flags&, TrainOptions&)> read = nullptr;
  // The field's saved value (the flag's spelling for enumerations); set when saved_as is.
  std::function<nlohmann::json(const TrainOptions&)> save = nullptr;
};

// The rows in --help order (after the data, recipe and model flags).
const std::vector<TrainSetting>& train_settings();

// The row of flag `name` (which must exist): for commands that take a few of the run's settings
// (the layout and device of `vtrain eval` and `generate`: cli/model_on_layout.cc).
const TrainSetting& train_setting(const std::string& name);

// Every row's field from the flags (the rows without a reader left as they are).
void read_train_settings(const Flags& f, TrainOptions& o);

// The saved options of the rows with a saved key.
nlohmann::json saved_train_settings(const TrainOptions& o);

// "key a -> b" for each noted row whose saved value in `saved` (a checkpoint's options JSON)
// differs from `now`'s, joined by ", "; "" when none differs.
std::string changed_on_resume(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace vt
