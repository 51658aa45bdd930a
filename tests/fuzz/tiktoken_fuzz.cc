// Fuzz target: .tiktoken ranks files (data/tokenizer.h load_tiktoken), then encoding and decoding
// with whatever loads: decode(encode(x)) must give x back.
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "fuzz_util.h"

using namespace vt;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    // Every byte (base64 of one byte) with its rank, then two merged tokens.
    std::string ranks;
    static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; ++b) {
      ranks += b64[b >> 2];
      ranks += b64[(b & 3) << 4];
      ranks += "== " + std::to_string(b) + "\n";
    }
    fuzz::write_text(dir + "/bytes.tiktoken", ranks + "aGU= 256\nbGw= 257\n");
    fuzz::write_text(dir + "/small.tiktoken", "YQ== 0\nYg== 1\n");
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "ranks.tiktoken";
  fuzz::write_bytes(path, data, size);
  auto tok = data::load_tiktoken(path.string());
  if (!tok.ok()) return 0;
  const std::string text = "hello, world 123 \xff\xfe";
  auto back = (*tok)->decode((*tok)->encode(text));
  if (!back.ok() || *back != text) std::abort();
  return 0;
}
