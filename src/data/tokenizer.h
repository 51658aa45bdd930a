// The Tokenizer interface and its factories. Three kinds:
//   bytes          256 byte tokens (id = byte value) + specials; no pre-split.
//   bpe:N          byte-level BPE trained by us (bpe_trainer.h) to N ids in total, specials included.
//   tiktoken:FILE  a .tiktoken ranks file (base64 token bytes, space, rank per line); id = rank.
// bpe and tiktoken share one encoder (bpe.h): the GPT-4 regex pre-split, then per chunk the
// tiktoken merge rule (repeatedly merge the adjacent pair whose concatenation has the lowest rank).
// Specials follow the regular ids: `<|bos|>` is id vocab_size() - 1.
//
// Saved form (`tokenizer.json` in a data dir), one JSON object:
//   {"format": "vtrain-tokenizer", "version": 1, "kind": "bytes" | "bpe" | "tiktoken",
//    "pattern": the pre-split regex ("" for bytes),
//    "tokens": [base64 of each regular token's bytes, index = id ("" for an unused id)],
//    "specials": {"<|bos|>": id, ...},
//    "merges": [[left_id, right_id, result_id], ...]   (bpe only, training order; informational)
//    "source": the ranks file a tiktoken tokenizer came from (informational)}
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vt::data {

inline constexpr const char* kBosToken = "<|bos|>";
inline constexpr const char* kTokenizerFile = "tokenizer.json";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "bytes", "bpe" or "tiktoken".
  virtual std::string kind() const = 0;
  // Encodes ordinary text (any bytes; special-token names in it are plain text).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Concatenates token bytes; specials decode to their names (e.g. "<|bos|>").
  // decode(encode(x)) == x for every byte string x. Ids outside the vocabulary are an error.
  absl::StatusOr<std::string> decode(std::span<const int32_t> ids) const;

  // Total ids: regular tokens followed by specials.
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size() + specials_.size()); }
  int32_t num_regular() const { return static_cast<int32_t>(tokens_.size()); }
  // The bytes of a regular token ("" for specials or unused ids).
  const std::string& token(int32_t id) const;
  // UTF-8 (byte) length of a token: 0 for specials and unused ids, so bits-per-byte ignores them.
  int32_t token_bytes(int32_t id) const;
  // Special tokens: id of a name, or -1.
  int32_t special_id(std::string_view name) const;
  const std::vector<std::string>& special_names() const { return specials_; }
  int32_t bos_id() const { return special_id(kBosToken); }

  // Writes the saved form above (atomically via path.tmp).
  absl::Status save(const std::string& path) const;

 protected:
  // Subclasses add their fields (pattern, merges, source) to the saved JSON.
  virtual void to_json(nlohmann::json& j) const = 0;
  std::vector<std::string> tokens_;    // regular tokens' bytes, index = id
  std::vector<std::string> specials_;  // special names; id = num_regular() + index
};

// The byte tokenizer: 256 byte tokens + `<|bos|>`.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Reading tokenizers from files: tokenizer_files.h.

// Per-token byte lengths for bits-per-byte, index = id (0 for specials), as token_bytes.bin holds.
std::vector<int32_t> token_bytes_table(const Tokenizer& tok);

}  // namespace vt::data
