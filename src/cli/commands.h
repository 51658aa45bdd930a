// The vtrain commands (src/cli/main.cc dispatches to them). Each one parses its flags with the
// shared parser (core/flags.h), answers --help from the same table before anything else runs
// (MPI included), and returns the process exit code (docs/design.md, "CLI" and "Exit codes").
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"

namespace vt::cli {

int cmd_prepare(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_diagnose(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_ckpt(int argc, char** argv);
int cmd_devices(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_export(int argc, char** argv);

// Prints `vtrain CMD: error: MSG` on stderr and returns 2 (errors of single-process commands).
int report_error(const char* cmd, const char* message);

// A checkpoint's model on this process (host memory, fp32): config, parameters, metadata.
struct LoadedModel {
  ModelConfig cfg;
  ParamStore store;
  std::unique_ptr<GPT> model;
  CheckpointMeta meta;
};
absl::StatusOr<std::unique_ptr<LoadedModel>> load_checkpoint_model(const std::string& ckpt);

// The tokenizer of a checkpoint: `data_dir`'s when given, else tokenizer.json beside the
// checkpoint, else the one of the data directory it was trained on (`meta_extra`'s data_dir).
absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer_for_checkpoint(
    const std::string& ckpt, const nlohmann::json& meta_extra, const std::string& data_dir);

}  // namespace vt::cli
