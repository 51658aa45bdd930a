// The Hugging Face tokenizers form of a vtrain tokenizer (see hf_tokenizer.h).
#include "data/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/file_safety.h"
#include "data/bpe.h"
#include "data/pretokenize.h"

namespace vt::data {
namespace {

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others (controls, space,
// 127-160, 173) for code points 256, 257, ... in byte order. Each entry is the UTF-8 of the symbol.
const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    auto utf8 = [](uint32_t cp) {
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {  // < 0x800 here
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      return s;
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t[b] = utf8(printable ? static_cast<uint32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

std::string symbols(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes) s += byte_symbols()[c];
  return s;
}

// vtrain's pre-split pattern for Oniguruma (tokenizers' Split). The syntax carries over
// (possessive quantifiers included), but the classes do not quite: PCRE2 counts U+180E MONGOLIAN
// VOWEL SEPARATOR as \s (its fixed \h list), Oniguruma does not; the two libraries' Unicode
// tables are of different versions (Debian 12's PCRE2 10.42 has Unicode 14, tokenizers 0.23's
// Oniguruma Unicode 16: letters and digits added since are \p{L} / \p{N} only to the latter);
// and \h, \v mean other things in Oniguruma. So each class
// escape (\p{..}, \P{..}, \s, \S, \d, \D, \w, \W, \h, \H, \v, \V) becomes the explicit code point
// ranges PCRE2 matches for it (pretokenize.h), nested classes where it stood inside one. Other
// escapes are copied as they are.
absl::StatusOr<std::string> oniguruma_pattern(std::string_view pcre) {
  absl::flat_hash_map<std::string, std::string> classes;
  std::string out;
  for (size_t i = 0; i < pcre.size(); ++i) {
    if (pcre[i] != '\\' || i + 1 == pcre.size()) {
      out += pcre[i];
      continue;
    }
    std::string esc(pcre.substr(i, 2));
    const char e = pcre[i + 1];
    if ((e == 'p' || e == 'P') && i + 2 < pcre.size() && pcre[i + 2] == '{') {
      const size_t close = pcre.find('}', i + 3);
      if (close == std::string_view::npos) return absl::InvalidArgumentError("unclosed \\p{ in the pattern");
      esc = std::string(pcre.substr(i, close + 1 - i));
    } else if (std::string_view("sSdDwWhHvV").find(e) == std::string_view::npos) {
      out += esc;  // any other escape: the same in both engines
      ++i;
      continue;
    }
    i += esc.size() - 1;
    auto it = classes.find(esc);
    if (it == classes.end()) {
      VT_ASSIGN_OR_RETURN(auto ranges, pcre2_class_ranges(esc));
      std::string c = "[";
      for (const auto& [lo, hi] : ranges) {
        absl::StrAppend(&c, "\\x{", absl::Hex(lo), "}");
        if (hi != lo) absl::StrAppend(&c, "-\\x{", absl::Hex(hi), "}");
      }
      if (ranges.empty()) c += "^\\x{0}-\\x{10FFFF}";  // matches nothing
      c += "]";
      it = classes.emplace(esc, std::move(c)).first;
    }
    out += it->second;
  }
  return out;
}

}  // namespace

absl::StatusOr<nlohmann::json> hf_tokenizer_json(const Tokenizer& tok) {
  using nlohmann::json;
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok);
  if (bpe == nullptr && tok.kind() != "bytes")
    return absl::InvalidArgumentError(absl::StrCat("no Hugging Face form for a '", tok.kind(),
                                                   "' tokenizer"));
  json vocab = json::object();
  for (int32_t id = 0; id < tok.num_regular(); ++id) {
    // An unused id (a gap in a tiktoken file) still needs a vocabulary entry: tokenizers numbers
    // the added tokens after the model's vocabulary size, so <|bos|> would move down. Its name
    // holds a space, which no byte-level word contains (space is the symbol U+0120), so it is
    // never produced.
    vocab[tok.token(id).empty() ? absl::StrCat("<|unused ", id, "|>") : symbols(tok.token(id))] = id;
  }
  // (result rank, left rank, right rank) of every split of a token into two tokens.
  std::vector<std::array<int32_t, 3>> splits;
  if (bpe != nullptr) {
    for (int32_t id = 0; id < tok.num_regular(); ++id) {
      const std::string& b = tok.token(id);
      for (size_t i = 1; i < b.size(); ++i) {
        const int32_t l = bpe->rank_of(std::string_view(b).substr(0, i));
        const int32_t r = bpe->rank_of(std::string_view(b).substr(i));
        if (l >= 0 && r >= 0) splits.push_back({id, l, r});
      }
    }
  }
  std::sort(splits.begin(), splits.end());
  json merges = json::array();
  for (const auto& [res, l, r] : splits)  // "left right": byte symbols never hold a space
    merges.push_back(absl::StrCat(symbols(tok.token(l)), " ", symbols(tok.token(r))));

  json added = json::array();
  for (const std::string& name : tok.special_names()) {
    added.push_back({{"id", tok.special_id(name)}, {"content", name}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", true}});
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                           {"trim_offsets", false}, {"use_regex", false}};
  json pre = byte_level;
  if (bpe != nullptr) {
    VT_ASSIGN_OR_RETURN(std::string pattern, oniguruma_pattern(bpe->pretokenizer().pattern()));
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}},
              {"behavior", "Isolated"}, {"invert", false}},
             byte_level}}};
  }
  json post = nullptr;
  if (tok.bos_id() >= 0) {
    auto special = [](const char* name) { return json{{"SpecialToken", {{"id", name}, {"type_id", 0}}}}; };
    auto seq = [](const char* name) { return json{{"Sequence", {{"id", name}, {"type_id", 0}}}}; };
    post = {{"type", "TemplateProcessing"},
            {"single", {special(kBosToken), seq("A")}},
            {"pair", {special(kBosToken), seq("A"), special(kBosToken), seq("B")}},
            {"special_tokens",
             {{kBosToken, {{"id", kBosToken}, {"ids", {tok.bos_id()}}, {"tokens", {kBosToken}}}}}}};
  }
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", std::move(added)},
              {"normalizer", nullptr},
              {"pre_tokenizer", std::move(pre)},
              {"post_processor", std::move(post)},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", true},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}}}};
}

nlohmann::json hf_tokenizer_config(const Tokenizer& tok, int64_t model_max_length) {
  nlohmann::json c = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                      {"model_max_length", model_max_length},
                      // decode must give back the text: no clean-up of spaces before punctuation
                      {"clean_up_tokenization_spaces", false},
                      // a special token's name inside text is text, as vtrain encodes documents
                      {"split_special_tokens", true}};
  if (tok.bos_id() >= 0) {
    c["bos_token"] = kBosToken;
    c["eos_token"] = kBosToken;  // ours: <|bos|> also ends each document of vtrain's stream
  }
  return c;
}

absl::Status write_hf_tokenizer(const Tokenizer& tok, int64_t model_max_length,
                                const std::string& dir) {
  VT_ASSIGN_OR_RETURN(nlohmann::json j, hf_tokenizer_json(tok));
  VT_RETURN_IF_ERROR(replace_file(dir + "/" + kHfTokenizerFile, j.dump() + "\n",
                                  "Hugging Face tokenizer file"));
  return replace_file(dir + "/" + kHfTokenizerConfigFile,
                      hf_tokenizer_config(tok, model_max_length).dump(1) + "\n",
                      "tokenizer config file");
}

}  // namespace vt::data
