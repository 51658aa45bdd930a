// PCRE2-backed pre-tokenizer: compiles the split regex once (UTF, UCP, MATCH_INVALID_UTF, JIT),
// then walks matches, filling any unmatched gap with its own chunk so no byte is ever dropped.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretokenize.h"

#include <pcre2.h>

#include "absl/strings/str_format.h"
#include "core/check.h"

namespace vt::data {

std::string_view cl100k_pattern() {
  static const std::string kPattern =
      R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
  return kPattern;
}

struct PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::shared_ptr<const PreTokenizer>> PreTokenizer::create(std::string_view pattern) {
  std::shared_ptr<PreTokenizer> p(new PreTokenizer());
  p->pattern_ = std::string(pattern);
  p->impl_ = std::make_unique<Impl>();
  int err = 0;
  PCRE2_SIZE err_off = 0;
  p->impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p->pattern_.data()), p->pattern_.size(),
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off,
                                 nullptr);
  if (p->impl_->code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad pre-tokenizer regex at offset %d: %s (pattern: %s)", err_off,
        reinterpret_cast<const char*>(buf), p->pattern_));
  }
  p->impl_->jit = pcre2_jit_compile(p->impl_->code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const PreTokenizer>(std::move(p));
}

absl::StatusOr<std::vector<std::pair<uint32_t, uint32_t>>> pcre2_class_ranges(std::string_view cls) {
  const std::string pattern = "(?:" + std::string(cls) + ")";
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return absl::InvalidArgumentError(absl::StrFormat("bad character class %s: %s", cls,
                                                      reinterpret_cast<const char*>(buf)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT it is only slower
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  unsigned char u[4];
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    size_t n;
    if (cp < 0x80) {
      u[0] = static_cast<unsigned char>(cp), n = 1;
    } else if (cp < 0x800) {
      u[0] = 0xC0 | (cp >> 6), u[1] = 0x80 | (cp & 0x3F), n = 2;
    } else if (cp < 0x10000) {
      u[0] = 0xE0 | (cp >> 12), u[1] = 0x80 | ((cp >> 6) & 0x3F), u[2] = 0x80 | (cp & 0x3F), n = 3;
    } else {
      u[0] = 0xF0 | (cp >> 18), u[1] = 0x80 | ((cp >> 12) & 0x3F), u[2] = 0x80 | ((cp >> 6) & 0x3F),
      u[3] = 0x80 | (cp & 0x3F), n = 4;
    }
    const int rc = pcre2_match(code, u, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, nullptr);
    if (rc <= 0) continue;
    if (!ranges.empty() && ranges.back().second + 1 == cp) {
      ranges.back().second = cp;
    } else if (!ranges.empty() && ranges.back().second == 0xD7FF && cp == 0xE000) {
      ranges.back().second = cp;  // across the surrogates, which no text holds
    } else {
      ranges.push_back({cp, cp});
    }
  }
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return ranges;
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  if (text.empty()) return;
  pcre2_code* code = impl_->code;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  VT_CHECK(md != nullptr);
  pcre2_jit_stack* stack = nullptr;
  // Explicit limits per match attempt (a pattern from an untrusted tokenizer.json may backtrack
  // catastrophically): past them the byte gets its own chunk below, so the cost of a byte is
  // bounded by kMatchLimit steps whatever the pattern. The GPT-4 pattern needs a few dozen.
  constexpr uint32_t kMatchLimit = 1000000, kDepthLimit = 10000;
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  VT_CHECK(mctx != nullptr);
  pcre2_set_match_limit(mctx, kMatchLimit);
  pcre2_set_depth_limit(mctx, kDepthLimit);
  if (impl_->jit) {
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  while (pos < n) {
    int rc = pcre2_match(code, subject, n, pos, 0, md, mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, n, pos, PCRE2_NO_JIT, md, mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      emit(text.substr(pos));  // trailing bytes nothing matched
      break;
    }
    if (rc < 0) {
      // A resource limit on pathological input: give this byte its own chunk and go on, so that
      // splitting never fails and never drops a byte.
      emit(text.substr(pos, 1));
      ++pos;
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t s = ov[0], e = ov[1];
    VT_CHECK(s >= pos && e >= s && e <= n);
    if (s > pos) emit(text.substr(pos, s - pos));  // gap the regex skipped over
    if (e == s) {
      // An empty match cannot make progress; give the next byte its own chunk.
      emit(text.substr(s, 1));
      pos = s + 1;
      continue;
    }
    emit(text.substr(s, e - s));
    pos = e;
  }
  pcre2_match_context_free(mctx);
  if (stack != nullptr) pcre2_jit_stack_free(stack);
  pcre2_match_data_free(md);
}

}  // namespace vt::data
