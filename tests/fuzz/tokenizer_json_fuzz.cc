// Fuzz target: tokenizer.json (data/tokenizer.h load_tokenizer), then encoding and decoding with
// whatever loads: decode(encode(x)) must give x back.
#include "data/bpe_trainer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "fuzz_util.h"

using namespace vt;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    (void)data::make_byte_tokenizer()->save(dir + "/bytes.json");
    data::BpeTrainOptions o;
    o.vocab_size = 300;
    auto bpe = data::train_bpe_on_text("the cat sat on the mat, the cat ate the rat 123 456", o);
    if (bpe.ok()) (void)(*bpe)->save(dir + "/bpe.json");
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "tokenizer.json";
  fuzz::write_bytes(path, data, size);
  auto tok = data::load_tokenizer(path.string());
  if (!tok.ok()) return 0;
  const std::string text = "the cat 123 \xe2\x82\xac \xff";
  auto back = (*tok)->decode((*tok)->encode(text));
  if (!back.ok() || *back != text) std::abort();
  (void)data::token_bytes_table(**tok);
  return 0;
}
