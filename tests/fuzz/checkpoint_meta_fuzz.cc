// Fuzz target: a checkpoint's metadata as vtrain reads it (checkpoint/checkpoint.h
// read_checkpoint_config and read_checkpoint_meta): the input is cut at NUL bytes into the root
// attributes format, format_version, config, loader_state, extra and layout of an HDF5 file
// written here, then read back; a loader state that parses is restored into a loader over a
// fixed data directory (data/loader.h load_state_json).
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/h5_file.h"
#include "data/loader.h"
#include "data/shards.h"
#include "fuzz_util.h"
#include "model/config.h"

using namespace vt;

namespace {

const char* kNames[] = {"format", "format_version", "config", "loader_state", "extra", "layout"};

std::string seed() {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.n_embd = 32;
  cfg.n_head = 2;
  cfg.n_kv_head = 2;
  cfg.head_dim = 16;
  cfg.vocab_size = 300;
  cfg.seq_len = 32;
  (void)cfg.finalize();
  const std::vector<std::string> parts = {
      kCheckpointFormat, "2", cfg.to_json().dump(),
      R"({"split":"train","epoch":0,"shard":0,"offset":8,"shuffle":false,"seed":1,"num_shards":1,"tokens_per_epoch":64})",
      R"({"steps": 4})", R"({"tp":1,"dp":1,"pp":1,"world":1})"};
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += parts[i] + (i + 1 < parts.size() ? std::string(1, '\0') : "");
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    fuzz::write_text(dir + "/attributes", seed());
    std::exit(0);
  }
  std::vector<int32_t> toks(64);
  for (int i = 0; i < 64; ++i) toks[i] = (i * 37) % 300;
  const auto data_dir = fuzz::scratch() / "data";
  std::filesystem::create_directories(data_dir);
  if (!data::write_shard((data_dir / "train_000000.bin").string(), toks, 300).ok()) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> attrs(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && attrs.size() < 6) attrs.emplace_back();
    else attrs.back().push_back(static_cast<char>(data[i]));
  }
  const std::string path = (fuzz::scratch() / "ckpt.h5").string();
  {
    auto f = h5::File::create(path);
    if (!f.ok()) std::abort();
    for (size_t i = 0; i < attrs.size(); ++i)
      if (!f->set_attr(kNames[i], attrs[i]).ok()) std::abort();
    if (!f->set_attr_i64("step", 4).ok() || !f->set_attr_i64("tokens", 512).ok()) std::abort();
    if (!f->close().ok()) std::abort();
  }
  (void)read_checkpoint_config(path);
  auto meta = read_checkpoint_meta(path);
  if (meta.ok()) {
    data::LoaderOptions lo;
    lo.vocab_size = 300;
    auto loader = data::DataLoader::open((fuzz::scratch() / "data").string(), "train", lo);
    if (!loader.ok()) std::abort();
    (void)loader->load_state_json(meta->loader_state);
  }
  return 0;
}
