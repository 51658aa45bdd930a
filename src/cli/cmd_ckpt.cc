// `vtrain ckpt inspect|verify PATH`: a checkpoint's header and datasets, or a full check of every
// dataset's checksum and values (checkpoint/checkpoint_verify.h).
#include <cstdio>
#include <string>

#include "checkpoint/checkpoint_verify.h"
#include "cli/commands.h"
#include "core/flags.h"

namespace vt::cli {

namespace {

const CommandSpec& ckpt_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain ckpt";
    c.synopsis = "vtrain ckpt inspect|verify PATH";
    c.max_positional = 2;
    c.epilog =
        "inspect  prints the step, tokens, config, layout and every dataset with its shape\n"
        "verify   reads every dataset, checks its checksum and that it holds finite values;\n"
        "         exit 0 when the checkpoint is sound, 2 otherwise (naming each bad dataset)\n";
    return c;
  }();
  return spec;
}

absl::Status run_ckpt(const Flags& f) {
  const auto& pos = f.positional();
  if (pos.size() != 2 || (pos[0] != "inspect" && pos[0] != "verify"))
    return absl::InvalidArgumentError("usage: vtrain ckpt inspect|verify PATH");
  const std::string& path = pos[1];
  if (pos[0] == "inspect") {
    VT_ASSIGN_OR_RETURN(CheckpointInfo info, inspect_checkpoint(path));
    std::printf("%s", format_checkpoint_info(info).c_str());
    return absl::OkStatus();
  }
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
