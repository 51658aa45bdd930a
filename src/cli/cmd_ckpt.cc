// `vtrain ckpt inspect|verify PATH`: a checkpoint's header and datasets, or a full check of every
// dataset's checksum and values (checkpoint/checkpoint_verify.h); `inspect --as-config` prints
// the run's saved options and model as a `vtrain train --config` file (cli/config_file.h).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_verify.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/model_flags.h"
#include "cli/train_flags.h"
#include "core/flags.h"
#include "train/settings.h"

namespace vt::cli {

namespace {

const CommandSpec& ckpt_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain ckpt";
    c.synopsis = "vtrain ckpt inspect|verify PATH";
    c.max_positional = 2;
    c.flags = {bool_flag("as-config",
                         "with inspect: print the run's saved options and model as a TOML file "
                         "that `vtrain train --config` reads back to the same options")};
    c.epilog =
        "inspect  prints the step, tokens, config, layout and every dataset with its shape;\n"
        "         with --as-config, the run's options as a `vtrain train --config` file\n"
        "verify   reads every dataset, checks its checksum and that it holds finite values;\n"
        "         exit 0 when the checkpoint is sound, 2 otherwise (naming each bad dataset)\n";
    return c;
  }();
  return spec;
}

// The checkpoint's run as a --config file: the model flags that rebuild its config, its data,
// and every saved setting of the settings table (train/settings.h) that applies to its
// optimizer. What is not saved (--ckpt-dir, --metrics, --resume, ...) is the caller's to add.
absl::StatusOr<std::string> as_config(const CheckpointInfo& info) {
  const nlohmann::json& saved = info.meta.extra;
  if (!saved.is_object() || !saved.contains("optimizer"))
    return absl::FailedPreconditionError(
        absl::StrCat(info.path, " records no run options (written by another tool or an older "
                     "vtrain)"));
  VT_ASSIGN_OR_RETURN(auto values, model_flags_of(info.config));
  const nlohmann::json& sources = saved.value("data_sources", nlohmann::json::array());
  std::string data = saved.value("data_dir", "");
  if (sources.is_array() && !sources.empty()) {
    data.clear();
    for (const nlohmann::json& s : sources)
      absl::StrAppend(&data, data.empty() ? "" : ",", s.value("name", ""), "=", s.value("dir", ""),
                      ":", s.value("weight", nlohmann::json(0.0)).dump());
  }
  values.push_back({"data", data});
  const std::string optimizer = saved["optimizer"].get<std::string>();
  for (const TrainSetting& s : train_settings()) {
    if (s.saved_as.empty() || !saved.contains(s.saved_as)) continue;
    const nlohmann::json& v = saved[s.saved_as];
    if (v.is_string() && v.get<std::string>().empty()) continue;  // a text flag left unset
    if (s.only_with && (*s.only_with == OptimizerKind::kMuon) != (optimizer == "muon")) continue;
    values.push_back({s.flag.name, v});
  }
  return config_text(train_command(), values,
                     absl::StrCat("vtrain train --config: the run of ", info.path, " (step ",
                                  info.meta.step, ").\nThe options a checkpoint does not "
                                  "record (--ckpt-dir, --metrics, --resume, ...) are not here."));
}

absl::Status run_ckpt(const Flags& f) {
  const auto& pos = f.positional();
  if (pos.size() != 2 || (pos[0] != "inspect" && pos[0] != "verify"))
    return absl::InvalidArgumentError("usage: vtrain ckpt inspect|verify PATH");
  const std::string& path = pos[1];
  if (pos[0] == "inspect") {
    VT_ASSIGN_OR_RETURN(CheckpointInfo info, inspect_checkpoint(path));
    if (f.get_bool("as-config")) {
      VT_ASSIGN_OR_RETURN(std::string text, as_config(info));
      std::printf("%s", text.c_str());
      return absl::OkStatus();
    }
    std::printf("%s", format_checkpoint_info(info).c_str());
    return absl::OkStatus();
  }
  if (f.get_bool("as-config"))
    return absl::InvalidArgumentError("--as-config goes with inspect (vtrain ckpt inspect --as-config PATH)");
  std::string summary;
  VT_RETURN_IF_ERROR(verify_checkpoint(path, nullptr, &summary));
  std::printf("%s: ok (%s)\n", path.c_str(), summary.c_str());
  return absl::OkStatus();
}

}  // namespace

int cmd_ckpt(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(ckpt_command()).c_str());
    return 0;
  }
  absl::StatusOr<Flags> f = Flags::parse(ckpt_command(), argc, argv, 2);
  absl::Status st = f.ok() ? run_ckpt(*f) : f.status();
  if (!st.ok()) return report_error("ckpt", std::string(st.message()).c_str());
  return 0;
}

}  // namespace vt::cli
