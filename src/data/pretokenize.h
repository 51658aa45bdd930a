// Pre-splitting text into chunks before BPE, with the GPT-4 (cl100k) regex run by PCRE2 in UTF +
// UCP mode with PCRE2_MATCH_INVALID_UTF. Every input byte lands in exactly one chunk, in order:
// bytes the regex does not match (invalid UTF-8, for one) are emitted as chunks of their own.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::data {

// The cl100k_base split pattern.
std::string_view cl100k_pattern();

// The code points (inclusive ranges, ascending; surrogates never) that the one-character class
// `cls` ("\p{L}", "\s", "[^\s\p{N}]") matches under the pre-tokenizer's PCRE2 options (UTF, UCP),
// so that another regex engine can be given exactly PCRE2's sets (hf_tokenizer.h).
absl::StatusOr<std::vector<std::pair<uint32_t, uint32_t>>> pcre2_class_ranges(std::string_view cls);

class PreTokenizer {
 public:
  // Compiles `pattern` (JIT when available). Errors say where the pattern is malformed.
  static absl::StatusOr<std::shared_ptr<const PreTokenizer>> create(std::string_view pattern);
  ~PreTokenizer();

  const std::string& pattern() const { return pattern_; }
  // Calls emit(chunk) for consecutive chunks whose concatenation is exactly `text`.
  // Thread-safe (per-call match data).
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  PreTokenizer() = default;
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vt::data
