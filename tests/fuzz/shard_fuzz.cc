// Fuzz target: llm.c token shards (data/shards.h) as the loader opens them: header checks against
// the file size, the memory map, reading every token, the vocabulary scan.
#include <vector>

#include "data/shards.h"
#include "fuzz_util.h"

using namespace vt;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    std::vector<int32_t> toks = {1, 2, 3, 299, 0, 17};
    (void)data::write_shard(dir + "/u16.bin", toks, 300);
    (void)data::write_shard(dir + "/u32.bin", toks, 100000);
    (void)data::write_shard(dir + "/empty.bin", {}, 300);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "shard.bin";
  fuzz::write_bytes(path, data, size);
  auto reader = data::ShardReader::open(path.string());
  if (!reader.ok()) return 0;
  (void)reader->check_ids(300);
  std::vector<int32_t> out(static_cast<size_t>(reader->num_tokens()));
  reader->read(0, reader->num_tokens(), out.data());
  auto whole = data::read_shard(path.string());
  if (whole.ok() && *whole != out) std::abort();  // two readers of one file disagree
  return 0;
}
