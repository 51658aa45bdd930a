// Loading the CORE eval bundle (see core_bundle.h): core.yaml, eval_meta_data.csv, task data.
#include "eval/core_bundle.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/check.h"
#include "core/file_safety.h"
#include "eval/py_random.h"

namespace vt::eval {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<std::string> read_all(const fs::path& p, const char* what) {
  std::ifstream f(p, std::ios::binary);
  if (!f)
    return absl::NotFoundError(absl::StrCat("CORE bundle: cannot read ", what, " ", p.string(),
                                            " (is --core the eval_bundle directory?)"));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(absl::string_view s) {
  return std::string(absl::StripAsciiWhitespace(s));
}

// Removes a comment: '#' at the start or after whitespace, outside quotes.
std::string strip_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return line.substr(0, i);
    }
  }
  return line;
}

absl::StatusOr<nlohmann::json> yaml_scalar(const std::string& raw, const std::string& where) {
  const std::string v = trim(raw);
  if (v.empty()) return nlohmann::json("");
  if (v[0] == '"') {
    std::string out;
    size_t i = 1;
    for (; i < v.size() && v[i] != '"'; ++i) {
      if (v[i] != '\\') {
        out += v[i];
        continue;
      }
      if (++i >= v.size()) break;
      switch (v[i]) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case ' ': out += ' '; break;
        case 'u': {
          uint32_t cp = 0;
          if (i + 4 >= v.size() || !absl::SimpleHexAtoi(v.substr(i + 1, 4), &cp))
            return absl::InvalidArgumentError(absl::StrCat(where, ": bad \\u escape"));
          i += 4;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          return absl::InvalidArgumentError(absl::StrCat(where, ": unsupported escape \\", std::string(1, v[i])));
      }
    }
    if (i >= v.size() || trim(v.substr(i + 1)) != "")
      return absl::InvalidArgumentError(absl::StrCat(where, ": unterminated or trailing text after \"...\""));
    return nlohmann::json(out);
  }
  if (v[0] == '\'') {
    std::string out;
    size_t i = 1;
    for (; i < v.size(); ++i) {
      if (v[i] == '\'') {
        if (i + 1 < v.size() && v[i + 1] == '\'') {
          out += '\'';
          ++i;
        } else {
          break;
        }
      } else {
        out += v[i];
      }
    }
    if (i >= v.size() || trim(v.substr(i + 1)) != "")
      return absl::InvalidArgumentError(absl::StrCat(where, ": unterminated '...'"));
    return nlohmann::json(out);
  }
  if (v[0] == '[') {
    if (v.back() != ']') return absl::InvalidArgumentError(absl::StrCat(where, ": unterminated [...]"));
    nlohmann::json arr = nlohmann::json::array();
    const std::string inner = trim(v.substr(1, v.size() - 2));
    if (!inner.empty())
      for (absl::string_view part : absl::StrSplit(inner, ',')) {
        VT_ASSIGN_OR_RETURN(nlohmann::json x, yaml_scalar(std::string(part), where));
        arr.push_back(x);
      }
    return arr;
  }
  int64_t n = 0;
  if (absl::SimpleAtoi(v, &n)) return nlohmann::json(n);
  return nlohmann::json(v);
}

// Splits one "CSV" line (RFC 4180 quoting).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

namespace {

std::string clip(const nlohmann::json& v) {
  const std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() <= 40 ? s : s.substr(0, 40) + "...";
}

// Text as nanochat's templates render it: a string, an integer or a boolean.
bool renderable(const nlohmann::json& v) {
  return v.is_string() || v.is_number_integer() || v.is_boolean();
}

absl::Status need_text(const nlohmann::json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end())
    return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" is missing (expected text)"));
  if (!renderable(*it))
    return absl::InvalidArgumentError(
        absl::StrCat("field \"", key, "\" is ", clip(*it), ", expected text (a string)"));
  return absl::OkStatus();
}

absl::Status need_list(const nlohmann::json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_array() || it->empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "field \"", key, "\" is ", it == row.end() ? std::string("missing") : clip(*it),
        ", expected a non-empty list of texts"));
  for (size_t i = 0; i < it->size(); ++i)
    if (!renderable((*it)[i]))
      return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" item ", i, " is ",
                                                     clip((*it)[i]), ", expected text"));
  return absl::OkStatus();
}

absl::Status need_gold(const nlohmann::json& row, const char* list_key) {
  const int64_t n = static_cast<int64_t>(row.at(list_key).size());
  const std::string range = absl::StrCat("an integer index into \"", list_key, "\", in [0, ", n - 1, "]");
  auto it = row.find("gold");
  if (it == row.end())
    return absl::InvalidArgumentError(absl::StrCat("field \"gold\" is missing, expected ", range));
  if (!it->is_number_integer())
    return absl::InvalidArgumentError(absl::StrCat("field \"gold\" is ", clip(*it), ", expected ", range));
  const bool neg = it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0;
  if (neg || it->get<uint64_t>() >= static_cast<uint64_t>(n))
    return absl::InvalidArgumentError(absl::StrCat("field \"gold\" is ", clip(*it), ", expected ", range));
  return absl::OkStatus();
}

}  // namespace

absl::Status check_core_row(CoreTaskType type, const nlohmann::json& row) {
  if (!row.is_object())
    return absl::InvalidArgumentError(absl::StrCat("the line is JSON ", row.type_name(), ", not an object"));
  switch (type) {
    case CoreTaskType::kMultipleChoice:
      VT_RETURN_IF_ERROR(need_text(row, "query"));
      VT_RETURN_IF_ERROR(need_list(row, "choices"));
      return need_gold(row, "choices");
    case CoreTaskType::kSchema:
      VT_RETURN_IF_ERROR(need_list(row, "context_options"));
      VT_RETURN_IF_ERROR(need_text(row, "continuation"));
      return need_gold(row, "context_options");
    case CoreTaskType::kLanguageModeling:
      VT_RETURN_IF_ERROR(need_text(row, "context"));
      return need_text(row, "continuation");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<nlohmann::json>> parse_core_rows(const std::string& text,
                                                             CoreTaskType type,
                                                             const std::string& path,
                                                             std::vector<int64_t>* lines) {
  std::vector<nlohmann::json> rows;
  int64_t line = 0;
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    ++line;
    if (trim(l).empty()) continue;
    nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": not a JSON object"));
    absl::Status st = check_core_row(type, j);
    if (!st.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", core_task_type_name(type),
                                                     " example: ", st.message()));
    rows.push_back(std::move(j));
    if (lines) lines->push_back(line);
  }
  return rows;
}

const char* core_task_type_name(CoreTaskType t) {
  switch (t) {
    case CoreTaskType::kMultipleChoice: return "multiple_choice";
    case CoreTaskType::kSchema: return "schema";
    case CoreTaskType::kLanguageModeling: return "language_modeling";
  }
  return "?";
}

absl::StatusOr<std::vector<nlohmann::json>> parse_core_yaml(const std::string& text,
                                                            const std::string& path) {
  std::vector<nlohmann::json> tasks;
  bool in_tasks = false;
  int line_no = 0;
  for (absl::string_view raw_line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const std::string where = absl::StrCat(path, ":", line_no);
    std::string line = strip_comment(std::string(raw_line));
    if (trim(line).empty()) continue;
    const bool top = line[0] != ' ' && line[0] != '\t' && line[0] != '-';
    if (top) {
      in_tasks = absl::StartsWith(trim(line), "icl_tasks:");
      if (in_tasks && trim(trim(line).substr(10)) != "")
        return absl::InvalidArgumentError(absl::StrCat(where, ": expected a block list under icl_tasks:"));
      continue;
    }
    if (!in_tasks) continue;
    std::string body = trim(line);
    if (body[0] == '-') {
      tasks.push_back(nlohmann::json::object());
      body = trim(body.substr(1));
      if (body.empty()) continue;
    }
    if (tasks.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": a key outside any list item"));
    const size_t colon = body.find(": ");
    const bool ends = !body.empty() && body.back() == ':';
    if (colon == std::string::npos && !ends)
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected 'key: value' (this reader "
                                                     "supports the flat mappings core.yaml uses)"));
    const std::string key = trim(body.substr(0, ends && colon == std::string::npos ? body.size() - 1 : colon));
    const std::string value = colon == std::string::npos ? "" : body.substr(colon + 2);
    VT_ASSIGN_OR_RETURN(tasks.back()[key], yaml_scalar(value, where));
  }
  return tasks;
}

absl::StatusOr<std::vector<CoreTask>> load_core_bundle(const std::string& dir, int max_per_task) {
  const fs::path root(dir);
  VT_ASSIGN_OR_RETURN(std::string yaml, read_all(root / "core.yaml", "task list"));
  VT_ASSIGN_OR_RETURN(std::vector<nlohmann::json> items, parse_core_yaml(yaml, (root / "core.yaml").string()));
  if (items.empty())
    return absl::InvalidArgumentError(absl::StrCat((root / "core.yaml").string(), " lists no icl_tasks"));
  // Random baselines by label.
  VT_ASSIGN_OR_RETURN(std::string csv, read_all(root / "eval_meta_data.csv", "metadata"));
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipWhitespace());
  if (lines.empty()) return absl::InvalidArgumentError("eval_meta_data.csv is empty");
  const std::vector<std::string> head = csv_fields(lines[0]);
  int col_task = -1, col_base = -1;
  for (int i = 0; i < static_cast<int>(head.size()); ++i) {
    if (trim(head[i]) == "Eval Task") col_task = i;
    if (trim(head[i]) == "Random baseline") col_base = i;
  }
  if (col_task < 0 || col_base < 0)
    return absl::InvalidArgumentError("eval_meta_data.csv needs the columns \"Eval Task\" and \"Random baseline\"");
  const std::string csv_path = (root / "eval_meta_data.csv").string();
  std::map<std::string, double> baselines;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = csv_fields(lines[i]);
    double b = 0;
    if (static_cast<int>(f.size()) <= std::max(col_task, col_base) || !absl::SimpleAtod(trim(f[col_base]), &b))
      return absl::InvalidArgumentError(absl::StrCat(csv_path, " line ", i + 1, ": no random baseline"));
    // The centered accuracy divides by 1 - baseline/100.
    if (!std::isfinite(b) || b < 0 || b >= 100)
      return absl::InvalidArgumentError(absl::StrCat(
          csv_path, " line ", i + 1, ": \"Random baseline\" of task ", trim(f[col_task]), " is ",
          trim(f[col_base]), ", expected a percentage in [0, 100)"));
    baselines[trim(f[col_task])] = b;
  }
  const std::string yaml_path = (root / "core.yaml").string();
  std::vector<CoreTask> tasks;
  std::map<std::string, size_t> item_of_label;  // label -> its icl_tasks item (1-based)
  for (const nlohmann::json& it : items) {
    CoreTask t;
    auto str = [&](const char* k) { return it.contains(k) && it[k].is_string() ? it[k].get<std::string>() : ""; };
    t.label = str("label");
    t.dataset_uri = str("dataset_uri");
    const std::string type = str("icl_task_type");
    if (t.label.empty() || t.dataset_uri.empty())
      return absl::InvalidArgumentError(absl::StrCat("core.yaml: a task without label or dataset_uri: ", it.dump()));
    if (type == "multiple_choice") t.type = CoreTaskType::kMultipleChoice;
    else if (type == "schema") t.type = CoreTaskType::kSchema;
    else if (type == "language_modeling") t.type = CoreTaskType::kLanguageModeling;
    else
      return absl::InvalidArgumentError(absl::StrCat("core.yaml: task ", t.label, ": unsupported icl_task_type '",
                                                     type, "' (multiple_choice, schema, language_modeling)"));
    if (auto [at, fresh] = item_of_label.emplace(t.label, tasks.size() + 1); !fresh)
      return absl::InvalidArgumentError(absl::StrCat(
          yaml_path, ": icl_tasks items ", at->second, " and ", tasks.size() + 1,
          " both have label '", t.label, "' (each task counts once in CORE)"));
    const nlohmann::json& shots = it.contains("num_fewshot") ? it["num_fewshot"] : nlohmann::json();
    const nlohmann::json& k = shots.is_array() && shots.size() == 1 ? shots[0] : shots;
    if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() > kMaxCoreFewshot ||
        (k.is_number_unsigned() && k.get<uint64_t>() > static_cast<uint64_t>(kMaxCoreFewshot)))
      return absl::InvalidArgumentError(absl::StrCat(
          yaml_path, ": task ", t.label, ": num_fewshot is ", shots.is_null() ? "missing" : clip(shots),
          ", expected [k] with an integer k in [0, ", kMaxCoreFewshot, "]"));
    t.num_fewshot = static_cast<int>(k.get<int64_t>());
    if (it.contains("continuation_delimiter")) {
      if (!it["continuation_delimiter"].is_string())
        return absl::InvalidArgumentError(absl::StrCat("core.yaml: task ", t.label, ": continuation_delimiter must be a string"));
      t.delimiter = it["continuation_delimiter"].get<std::string>();
    }
    auto b = baselines.find(t.label);
    if (b == baselines.end())
      return absl::InvalidArgumentError(absl::StrCat("eval_meta_data.csv has no row for task ", t.label));
    t.random_baseline = b->second;
    // A bundle refers only to files inside itself (file_safety.h): no absolute dataset_uri, no
    // `..`, no link out of the bundle.
    VT_ASSIGN_OR_RETURN(const std::string inside,
                        path_inside(dir, (fs::path("eval_data") / t.dataset_uri).string(),
                                    (root / "core.yaml").string(),
                                    absl::StrCat("task ", t.label, ": dataset_uri")));
    const fs::path data_path(inside);
    std::error_code ec;
    if (fs::exists(data_path, ec) && !fs::is_regular_file(data_path, ec))
      return absl::InvalidArgumentError(absl::StrCat(
          yaml_path, ": task ", t.label, ": dataset_uri ", t.dataset_uri, " names ",
          data_path.string(), ", which is not a regular file (expected a JSON-lines file)"));
    VT_ASSIGN_OR_RETURN(std::string data, read_all(data_path, "task data"));
    t.data_path = data_path.string();
    VT_ASSIGN_OR_RETURN(t.data, parse_core_rows(data, t.type, t.data_path, &t.lines));
    if (t.data.empty())
      return absl::InvalidArgumentError(absl::StrCat(t.data_path, " (task ", t.label,
                                                     ") holds no examples"));
    PyRandom rng(1337), same(1337);  // one permutation for the rows and their line numbers
    rng.shuffle(t.data);
    same.shuffle(t.lines);
    if (max_per_task > 0 && static_cast<int>(t.data.size()) > max_per_task) {
      t.data.resize(max_per_task);
      t.lines.resize(max_per_task);
    }
    if (t.num_fewshot >= static_cast<int>(t.data.size()) && t.num_fewshot > 0)
      return absl::InvalidArgumentError(absl::StrCat("task ", t.label, " has ", t.data.size(),
                                                     " examples, too few for ", t.num_fewshot, "-shot"));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace vt::eval
