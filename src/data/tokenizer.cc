// Tokenizer base (decode, token lengths, specials, save), the byte tokenizer, and loading:
// tokenizer.json from a data dir and .tiktoken ranks files.
#include "data/tokenizer.h"

#include <algorithm>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/file_safety.h"

namespace vt::data {
namespace {

const std::string kEmpty;

class ByteTokenizer : public Tokenizer {
 public:
  ByteTokenizer() {
    tokens_.resize(256);
    for (int c = 0; c < 256; ++c) tokens_[c] = std::string(1, static_cast<char>(c));
    specials_ = {kBosToken};
  }
  std::string kind() const override { return "bytes"; }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out(text.size());
    for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<uint8_t>(text[i]);
    return out;
  }

 protected:
  void to_json(nlohmann::json& j) const override { j["pattern"] = ""; }
};


}  // namespace

absl::StatusOr<std::string> Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  const int32_t nreg = num_regular();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && id < nreg) {
      out += tokens_[id];
    } else if (id >= nreg && id < vocab_size()) {
      out += specials_[id - nreg];
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cannot decode token id %d at position %d: the vocabulary has ids [0, %d)", id, i,
          vocab_size()));
    }
  }
  return out;
}

const std::string& Tokenizer::token(int32_t id) const {
  return id >= 0 && id < num_regular() ? tokens_[id] : kEmpty;
}

int32_t Tokenizer::token_bytes(int32_t id) const { return static_cast<int32_t>(token(id).size()); }

int32_t Tokenizer::special_id(std::string_view name) const {
  for (size_t i = 0; i < specials_.size(); ++i) {
    if (specials_[i] == name) return num_regular() + static_cast<int32_t>(i);
  }
  return -1;
}

absl::Status Tokenizer::save(const std::string& path) const {
  nlohmann::json j;
  j["format"] = "vtrain-tokenizer";
  j["version"] = 1;
  j["kind"] = kind();
  nlohmann::json toks = nlohmann::json::array();
  for (const std::string& t : tokens_) toks.push_back(absl::Base64Escape(t));
  j["tokens"] = std::move(toks);
  nlohmann::json sp = nlohmann::json::object();
  for (const std::string& s : specials_) sp[s] = special_id(s);
  j["specials"] = std::move(sp);
  to_json(j);
  // Through path.tmp and a rename, never following a link planted under either name (the
  // checkpoint directory gets a copy: file_safety.h).
  return replace_file(path, j.dump() + "\n", "tokenizer file");
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::vector<int32_t> token_bytes_table(const Tokenizer& tok) {
  std::vector<int32_t> out(tok.vocab_size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) out[id] = tok.token_bytes(id);
  return out;
}

}  // namespace vt::data
