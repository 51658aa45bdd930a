// A vtrain tokenizer as a Hugging Face `tokenizers` file (`tokenizer.json`) plus transformers'
// `tokenizer_config.json`, so that `tokenizers.Tokenizer.from_file` and
// `AutoTokenizer.from_pretrained(DIR)` encode text to vtrain's ids. `vtrain export` writes both.
//
// The tokenizers pipeline: pre-tokenizer Sequence[Split(vtrain's regex with its classes written
// out as the code point ranges PCRE2 matches, Isolated), ByteLevel
// without its own regex] (bytes map to the printable symbols of GPT-2's bytes_to_unicode), model
// BPE with `ignore_merges` (a chunk that is itself a token is that token, as in tiktoken), decoder
// ByteLevel, the specials as added tokens, and a TemplateProcessing post-processor that puts
// <|bos|> first when special tokens are asked for (vtrain starts every document with it).
// Merges come from the ranks, as transformers' TikTokenConverter derives them: every split of a
// token into two tokens is a merge, ordered by the result's rank (then the pieces' ranks), so
// the BPE merges any adjacent pair whose concatenation is a token, lowest rank first: the
// tiktoken rule vtrain encodes with (bpe.h). An unused id (a gap in a ranks file) gets the
// placeholder "<|unused ID|>", which no byte-level word can spell, so the ids stay vtrain's. The
// bytes tokenizer is a BPE without merges and without a pre-split.
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace vt::data {

inline constexpr const char* kHfTokenizerFile = "tokenizer.json";
inline constexpr const char* kHfTokenizerConfigFile = "tokenizer_config.json";

// The tokenizers JSON of `tok`.
absl::StatusOr<nlohmann::json> hf_tokenizer_json(const Tokenizer& tok);
// transformers' tokenizer_config.json: PreTrainedTokenizerFast, bos (and eos: <|bos|> also ends a
// document in vtrain's stream), model_max_length.
nlohmann::json hf_tokenizer_config(const Tokenizer& tok, int64_t model_max_length);
// Writes both into `dir` (which exists).
absl::Status write_hf_tokenizer(const Tokenizer& tok, int64_t model_max_length,
                                const std::string& dir);

}  // namespace vt::data
