// Fuzz target: a data directory's meta.json (data/loader.h DataLoader::open), beside one valid
// shard, then a batch from whatever opens.
#include <vector>

#include "data/loader.h"
#include "data/shards.h"
#include "fuzz_util.h"

using namespace vt;

namespace {
const char* kMeta = R"({"format": "vtrain-data", "version": 1, "tokenizer": {"vocab_size": 300},
  "train": {"tokens": 64, "shards": ["train_000000.bin"]},
  "val": {"tokens": 64, "shards": ["train_000000.bin"]}})";
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    fuzz::write_text(dir + "/meta.json", kMeta);
    std::exit(0);
  }
  std::vector<int32_t> toks(64);
  for (int i = 0; i < 64; ++i) toks[i] = (i * 37) % 300;
  if (!data::write_shard((fuzz::scratch() / "train_000000.bin").string(), toks, 300).ok()) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_bytes(fuzz::scratch() / "meta.json", data, size);
  for (const char* split : {"train", "val"}) {
    auto loader = data::DataLoader::open(fuzz::scratch().string(), split);
    if (!loader.ok()) continue;
    std::vector<int32_t> in(8 * 4), tg(8 * 4);
    (void)loader->next_batch_into(4, 8, 0, 1, in.data(), tg.data());
  }
  return 0;
}
