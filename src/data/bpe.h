// The rank-based BPE tokenizer shared by `bpe:N` (trained here) and `tiktoken:FILE`: the regex
// pre-split, then per chunk tiktoken's rule: a chunk that is itself a token is that token; else
// start from single bytes and repeatedly merge the adjacent pair whose concatenation has the lowest
// rank (id), leftmost first on ties, until no adjacent concatenation is a token. Chunk results are
// cached per thread (encode is thread-safe and lock-free). Encoding is O(n log n) per chunk, so
// long whitespace runs stay cheap.
#pragma once
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace vt::data {

// One training merge: tokens `left` and `right` became `result` (training order = rank order).
struct BpeMerge {
  int32_t left = 0, right = 0, result = 0;
};

class BpeTokenizer : public Tokenizer {
 public:
  // tokens[id] = bytes of regular token id ("" marks an unused id). Every single byte must be a
  // token and non-empty tokens must be distinct. `kind` is "bpe" or "tiktoken".
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> create(
      std::string kind, std::vector<std::string> tokens, std::vector<std::string> specials,
      std::string_view pattern, std::vector<BpeMerge> merges = {}, std::string source = "");

  std::string kind() const override { return kind_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  // Encodes one pre-split chunk (no cache), appending ids to out.
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  const std::vector<BpeMerge>& merges() const { return merges_; }
  const PreTokenizer& pretokenizer() const { return *pretok_; }
  // Id of a regular token's bytes, or -1.
  int32_t rank_of(std::string_view bytes) const;

 protected:
  void to_json(nlohmann::json& j) const override;

 private:
  BpeTokenizer() = default;
  std::string kind_;
  std::string source_;
  std::vector<BpeMerge> merges_;
  std::shared_ptr<const PreTokenizer> pretok_;
  absl::flat_hash_map<std::string, int32_t> ranks_;
  int32_t byte_id_[256] = {};
  uint64_t instance_ = 0;  // identifies this tokenizer's entries in the per-thread chunk caches
};

}  // namespace vt::data
