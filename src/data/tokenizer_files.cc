
// Tokenizers from files (see tokenizer_files.h).
#include "data/tokenizer_files.h"

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
#include "core/json_integer.h"
#include "data/bpe.h"

namespace vt::data {
namespace {

constexpr int64_t kMaxTiktokenRank = int64_t{1} << 22;  // 4M ids; o200k has 200k

absl::StatusOr<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", what, " ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tiktoken(const std::string& ranks_path) {
  VT_ASSIGN_OR_RETURN(std::string text, read_file(ranks_path, "tiktoken ranks file"));
  std::vector<std::string> tokens;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    std::string bytes;
    int64_t rank = -1;
    if (parts.size() != 2 || !absl::Base64Unescape(parts[0], &bytes) ||
        !absl::SimpleAtoi(parts[1], &rank) || rank < 0 || bytes.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: expected '<base64 token bytes> <rank>' (a .tiktoken ranks file), got '%s'",
          ranks_path, line_no, std::string(line.substr(0, 80))));
    }
    // Ranks may leave gaps (unused ids), but a rank sizes the vocabulary: refuse one beyond any
    // real vocabulary instead of allocating it.
    if (rank >= kMaxTiktokenRank) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: rank %d is beyond vtrain's vocabulary limit of %d ids", ranks_path, line_no,
          rank, kMaxTiktokenRank));
    }
    if (static_cast<int64_t>(tokens.size()) <= rank) tokens.resize(rank + 1);
    if (!tokens[rank].empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: rank %d appears twice", ranks_path, line_no, rank));
    }
    tokens[rank] = std::move(bytes);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(ranks_path, " holds no tokens"));
  }
  // Unused ids still cost an embedding row and a logit each: a file whose gaps would inflate
  // the vocabulary is refused (real ranks files are dense: cl100k, o200k).
  const int64_t present = std::count_if(tokens.begin(), tokens.end(),
                                        [](const std::string& b) { return !b.empty(); });
  const int64_t unused = static_cast<int64_t>(tokens.size()) - present;
  const int64_t allowed = std::max<int64_t>(1024, static_cast<int64_t>(tokens.size()) / 100);
  if (unused > allowed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: ranks up to %d hold only %d tokens: %d ids would be unused rows of the model (at "
        "most %d, 1%% of the vocabulary or 1024, may be); renumber the ranks densely",
        ranks_path, static_cast<int64_t>(tokens.size()) - 1, present, unused, allowed));
  }
  auto t = BpeTokenizer::create("tiktoken", std::move(tokens), {kBosToken}, cl100k_pattern(), {},
                                ranks_path);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(ranks_path, ": ", t.status().message()));
  return std::unique_ptr<Tokenizer>(std::move(t).value());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& datadir_or_file) {
  std::string path = datadir_or_file;
  struct stat sb;
  if (::stat(path.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) path += std::string("/") + kTokenizerFile;
  VT_ASSIGN_OR_RETURN(std::string text, read_file(path, "tokenizer file"));
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what,
                                            "; the file is corrupt or not written by vtrain prepare"));
  };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not valid JSON");
  try {  // any field of the wrong JSON type throws: reported as a corrupt file
    if (j.contains("model") && j.contains("added_tokens") && !j.contains("format"))
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a Hugging Face tokenizers file, not vtrain's; `vtrain export` writes vtrain's "
          "own beside it as vtrain_tokenizer.json"));
    if (j.value("format", "") != "vtrain-tokenizer") return bad("missing \"format\": \"vtrain-tokenizer\"");
    if (!j.contains("version") || json_integer<int64_t>(j["version"]) != 1) return bad("unsupported version (expected 1)");
    const std::string kind = j.at("kind").get<std::string>();
    std::vector<std::string> tokens;
    for (const auto& b64 : j.at("tokens")) {
      std::string bytes;
      if (!absl::Base64Unescape(b64.get<std::string>(), &bytes)) return bad("a token is not base64");
      tokens.push_back(std::move(bytes));
    }
    // Specials sorted by id; they must directly follow the regular tokens.
    std::vector<std::string> specials(j.at("specials").size());
    for (const auto& [name, id] : j.at("specials").items()) {
      int64_t k = json_integer<int64_t>(id) - static_cast<int64_t>(tokens.size());
      if (k < 0 || k >= static_cast<int64_t>(specials.size())) return bad("special id out of range");
      specials[k] = name;
    }
    std::unique_ptr<Tokenizer> tok;
    if (kind == "bytes") {
      tok = make_byte_tokenizer();
      if (tok->num_regular() != static_cast<int32_t>(tokens.size()) || tok->special_names() != specials) {
        return bad("a bytes tokenizer must have 256 tokens and the <|bos|> special");
      }
      return tok;
    }
    if (kind != "bpe" && kind != "tiktoken") return bad("unknown kind '" + kind + "'");
    std::vector<BpeMerge> merges;
    if (j.contains("merges")) {
      for (const auto& m : j.at("merges")) merges.push_back({json_integer<int32_t>(m.at(0)), json_integer<int32_t>(m.at(1)),
                          json_integer<int32_t>(m.at(2))});
    }
    auto t = BpeTokenizer::create(kind, std::move(tokens), std::move(specials),
                                  j.at("pattern").get<std::string>(), std::move(merges),
                                  j.value("source", ""));
    if (!t.ok()) return bad(std::string(t.status().message()));
    return std::unique_ptr<Tokenizer>(std::move(t).value());
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("unexpected structure (") + e.what() + ")");
  }
}

}  // namespace vt::data
