// Helpers the commands share (see commands.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "core/check.h"
#include "data/tokenizer_files.h"

namespace vt::cli {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<LoadedModel>> load_checkpoint_model(const std::string& ckpt) {
  auto m = std::make_unique<LoadedModel>();
  VT_ASSIGN_OR_RETURN(m->cfg, read_checkpoint_config(ckpt));
  VT_ASSIGN_OR_RETURN(m->meta, read_checkpoint_meta(ckpt));
  m->model = std::make_unique<GPT>(m->cfg);
  m->model->register_params(m->store);
  m->store.finalize();
  VT_RETURN_IF_ERROR(load_checkpoint_params(ckpt, m->store));
  return m;
}

int report_error(const char* cmd, const char* message) {
  std::fflush(stdout);
  std::fprintf(stderr, "vtrain %s: error: %s\n", cmd, message);
  return 2;
}

absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer_for_checkpoint(
    const std::string& ckpt, const nlohmann::json& meta_extra, const std::string& data_dir) {
  const fs::path beside = fs::path(ckpt).parent_path() / "tokenizer.json";
  if (!data_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(data_dir, ec))
      return absl::InvalidArgumentError(absl::StrCat(
          "--data ", data_dir, " is not a data directory; this command reads one directory made "
          "by vtrain prepare (a mixture NAME=DIR:WEIGHT,... or .json file is train's: give one "
          "source's directory)"));
    // The checkpoint's own tokenizer, where its run saved one, must be the directory's.
    if (fs::exists(beside, ec) && fs::exists(fs::path(data_dir) / "tokenizer.json", ec)) {
      auto bytes = [](const fs::path& p) {
        std::ifstream f(p, std::ios::binary);
        return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      };
      if (bytes(beside) != bytes(fs::path(data_dir) / "tokenizer.json")) {
        // Another vocabulary size is the caller's to name (with both sizes).
        auto theirs = data::load_tokenizer(data_dir);
        auto ours = data::load_tokenizer(beside.string());
        if (theirs.ok() && ours.ok() && (*theirs)->vocab_size() != (*ours)->vocab_size())
          return theirs;
        return absl::InvalidArgumentError(absl::StrCat(
            "--data ", data_dir, " has another tokenizer than the checkpoint's run (",
            beside.string(), "); its ids would mean other text: give the data directory the "
            "run was trained on, or one prepared with --tokenizer from:",
            beside.parent_path().empty() ? std::string(".") : beside.parent_path().string()));
      }
    }
    return data::load_tokenizer(data_dir);
  }
  if (fs::exists(beside)) return data::load_tokenizer(beside.string());
  std::string trained_on;
  if (meta_extra.is_object() && meta_extra.contains("data_dir") && meta_extra["data_dir"].is_string())
    trained_on = meta_extra["data_dir"].get<std::string>();
  if (!trained_on.empty() && fs::exists(trained_on)) return data::load_tokenizer(trained_on);
  return absl::NotFoundError(absl::StrCat("no tokenizer.json next to ", ckpt,
                                          " and the training data directory is gone; pass --data DATADIR"));
}

}  // namespace vt::cli
