// Rendering, tokenizing and cropping one CORE example (see core_prompts.h).
#include "eval/core_prompts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "eval/py_random.h"

namespace vt::eval {
namespace {

// Decodes one UTF-8 code point at s[i] (invalid bytes decode as themselves, length 1).
uint32_t code_point(const std::string& s, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = static_cast<size_t>(n);
  return cp;
}

// Python's str.isspace().
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// {{ value }} in Jinja: str(value).
absl::StatusOr<std::string> render(const nlohmann::json& v, const char* what) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_boolean()) return std::string(v.get<bool>() ? "True" : "False");
  return absl::InvalidArgumentError(absl::StrCat("the example's ", what, " is ", v.dump(), ", not text"));
}

absl::StatusOr<std::string> field(const nlohmann::json& item, const char* key) {
  if (!item.is_object() || !item.contains(key))
    return absl::InvalidArgumentError(absl::StrCat("an example has no \"", key, "\" field"));
  return render(item[key], key);
}

absl::StatusOr<std::string> pick(const nlohmann::json& item, const char* list_key) {
  if (!item.contains(list_key) || !item[list_key].is_array() || !item.contains("gold") ||
      !item["gold"].is_number_integer())
    return absl::InvalidArgumentError(absl::StrCat("an example needs \"", list_key, "\" and \"gold\""));
  const int64_t g = item["gold"];
  if (g < 0 || g >= static_cast<int64_t>(item[list_key].size()))
    return absl::InvalidArgumentError(absl::StrCat("gold ", g, " is outside \"", list_key, "\""));
  return render(item[list_key][g], list_key);
}

absl::StatusOr<std::vector<std::string>> list(const nlohmann::json& item, const char* key) {
  if (!item.contains(key) || !item[key].is_array() || item[key].empty())
    return absl::InvalidArgumentError(absl::StrCat("an example needs a non-empty list \"", key, "\""));
  std::vector<std::string> out;
  for (const nlohmann::json& v : item[key]) {
    VT_ASSIGN_OR_RETURN(std::string s, render(v, key));
    out.push_back(std::move(s));
  }
  return out;
}

size_t common_prefix(const std::vector<std::vector<int32_t>>& rows) {
  size_t n = rows[0].size();
  for (const auto& r : rows) n = std::min(n, r.size());
  for (size_t i = 0; i < n; ++i)
    for (const auto& r : rows)
      if (r[i] != rows[0][i]) return i;
  return n;
}

size_t common_suffix(const std::vector<std::vector<int32_t>>& rows) {
  size_t n = rows[0].size();
  for (const auto& r : rows) n = std::min(n, r.size());
  for (size_t i = 0; i < n; ++i)
    for (const auto& r : rows)
      if (r[r.size() - 1 - i] != rows[0][rows[0].size() - 1 - i]) return i;
  return n;
}

}  // namespace

std::string py_strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    size_t len = 0;
    if (!py_space(code_point(s, b, &len))) break;
    b += len;
  }
  // From the end: step back to the start of the last code point.
  while (e > b) {
    size_t p = e - 1;
    while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80 && e - p < 4) --p;
    size_t len = 0;
    const uint32_t cp = code_point(s, p, &len);
    if (p + len != e || !py_space(cp)) break;
    e = p;
  }
  return s.substr(b, e - b);
}

absl::StatusOr<std::vector<std::string>> render_core_prompts(const CoreTask& task, int64_t index) {
  const auto& data = task.data;
  const nlohmann::json& item = data.at(index);
  std::vector<int64_t> shots;
  if (task.num_fewshot > 0) {
    PyRandom rng(1234 + static_cast<uint64_t>(index));
    std::vector<int64_t> available;
    for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i)
      if (i != index) available.push_back(i);
    shots = rng.sample(available, task.num_fewshot);
  }
  const std::string& d = task.delimiter;
  std::string prefix;
  std::vector<std::string> out;
  switch (task.type) {
    case CoreTaskType::kMultipleChoice: {
      for (int64_t s : shots) {
        VT_ASSIGN_OR_RETURN(std::string q, field(data[s], "query"));
        VT_ASSIGN_OR_RETURN(std::string a, pick(data[s], "choices"));
        absl::StrAppend(&prefix, q, d, a, "\n\n");
      }
      VT_ASSIGN_OR_RETURN(std::string q, field(item, "query"));
      VT_ASSIGN_OR_RETURN(std::vector<std::string> choices, list(item, "choices"));
      for (const std::string& c : choices) out.push_back(absl::StrCat(prefix, q, d, c));
      break;
    }
    case CoreTaskType::kSchema: {
      for (int64_t s : shots) {
        VT_ASSIGN_OR_RETURN(std::string ctx, pick(data[s], "context_options"));
        VT_ASSIGN_OR_RETURN(std::string cont, field(data[s], "continuation"));
        absl::StrAppend(&prefix, ctx, d, cont, "\n\n");
      }
      VT_ASSIGN_OR_RETURN(std::vector<std::string> options, list(item, "context_options"));
      VT_ASSIGN_OR_RETURN(std::string cont, field(item, "continuation"));
      for (const std::string& o : options) out.push_back(absl::StrCat(prefix, o, d, cont));
      break;
    }
    case CoreTaskType::kLanguageModeling: {
      for (int64_t s : shots) {
        VT_ASSIGN_OR_RETURN(std::string ctx, field(data[s], "context"));
        VT_ASSIGN_OR_RETURN(std::string cont, field(data[s], "continuation"));
        absl::StrAppend(&prefix, py_strip(ctx), d, cont, "\n\n");
      }
      VT_ASSIGN_OR_RETURN(std::string ctx, field(item, "context"));
      VT_ASSIGN_OR_RETURN(std::string cont, field(item, "continuation"));
      const std::string without = absl::StrCat(prefix, py_strip(ctx), d);
      out.push_back(py_strip(without));
      out.push_back(absl::StrCat(without, cont));
      break;
    }
  }
  return out;
}

absl::StatusOr<CoreExample> build_core_example(const CoreTask& task, int64_t index,
                                               const data::Tokenizer& tok, int max_len) {
  auto prompts = render_core_prompts(task, index);
  if (!prompts.ok())
    return absl::InvalidArgumentError(absl::StrCat("CORE task ", task.label, ", example ", index,
                                                   ": ", prompts.status().message()));
  CoreExample ex;
  for (const std::string& p : *prompts) {
    std::vector<int32_t> row = {tok.bos_id()};
    const std::vector<int32_t> ids = tok.encode(p);
    row.insert(row.end(), ids.begin(), ids.end());
    ex.rows.push_back(std::move(row));
  }
  const int n = static_cast<int>(ex.rows.size());
  switch (task.type) {
    case CoreTaskType::kMultipleChoice: {
      const int s = static_cast<int>(common_prefix(ex.rows));
      for (int i = 0; i < n; ++i) {
        ex.start.push_back(s);
        ex.end.push_back(static_cast<int>(ex.rows[i].size()));
      }
      ex.gold = task.data[index].value("gold", 0);
      break;
    }
    case CoreTaskType::kSchema: {
      const int suffix = static_cast<int>(common_suffix(ex.rows));
      for (int i = 0; i < n; ++i) {
        ex.end.push_back(static_cast<int>(ex.rows[i].size()));
        ex.start.push_back(ex.end.back() - suffix);
      }
      ex.gold = task.data[index].value("gold", 0);
      break;
    }
    case CoreTaskType::kLanguageModeling: {
      const std::vector<int32_t>& without = ex.rows[0];
      const std::vector<int32_t>& with = ex.rows[1];
      if (without.size() >= with.size() || !std::equal(without.begin(), without.end(), with.begin()))
        return absl::InvalidArgumentError(absl::StrCat(
            "CORE task ", task.label, ", example ", index,
            ": the tokens of the prompt without the continuation are not a prefix of the prompt "
            "with it (nanochat asserts the same)"));
      ex.start = {static_cast<int>(without.size())};
      ex.end = {static_cast<int>(with.size())};
      ex.rows.erase(ex.rows.begin());  // only the prompt with the continuation is scored
      break;
    }
  }
  for (size_t i = 0; i < ex.rows.size(); ++i) {
    const int len = static_cast<int>(ex.rows[i].size());
    if (len <= max_len) continue;
    const int crop = len - max_len;
    // Cropped from the left as nanochat does (docs/design.md, "CORE bundles"); the scored tokens
    // must survive the crop (nanochat asserts it).
    if (ex.start[i] - crop < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "CORE task ", task.label, ", example ",
          index < static_cast<int64_t>(task.lines.size())
              ? absl::StrCat(task.data_path, ":", task.lines[index])
              : absl::StrCat(index),
          ": its scored continuation (", ex.end[i] - ex.start[i], " tokens) does not fit in the ",
          max_len, "-token context of the model"));
    ex.rows[i].erase(ex.rows[i].begin(), ex.rows[i].begin() + crop);
    ex.start[i] -= crop;
    ex.end[i] -= crop;
  }
  return ex;
}

}  // namespace vt::eval
