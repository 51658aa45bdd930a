// Data mixtures (mixture.h): parsing and checking --data / --data-stage, and the MixtureLoader.
#include "data/mixture.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/check.h"
#include "core/json_integer.h"
#include "data/tokenizer_files.h"

namespace vt::data {
namespace fs = std::filesystem;

std::vector<std::string> MixtureSpec::names() const {
  std::vector<std::string> out;
  for (const MixtureSource& s : sources) out.push_back(s.name);
  return out;
}

std::string MixtureSpec::describe_stage(size_t i) const {
  std::vector<std::string> parts;
  for (size_t k = 0; k < sources.size(); ++k)
    parts.push_back(absl::StrFormat("%s %.3g", sources[k].name, stages[i].weights[k]));
  return absl::StrJoin(parts, ", ");
}

namespace {

absl::StatusOr<double> parse_weight(const std::string& flag, const std::string& name,
                                    const std::string& text) {
  double w = 0;
  // Decimal only: SimpleAtod also takes hexadecimal ("0x10" was read as 16).
  if (text.find_first_not_of("0123456789.eE+-") != std::string::npos ||
      !absl::SimpleAtod(text, &w) || !std::isfinite(w))
    return absl::InvalidArgumentError(absl::StrCat(flag, ": the weight of '", name, "' is '", text,
                                                   "', not a number"));
  if (w < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": the weight of '", name, "' is ", text, "; weights are >= 0"));
  return w;
}

// Weights normalized to sum 1; refused when all are zero.
absl::StatusOr<std::vector<double>> normalized(const std::string& flag, std::vector<double> w) {
  double sum = 0;
  for (double x : w) sum += x;
  if (!(sum > 0))
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": every weight is zero; give at least one source a positive weight"));
  for (double& x : w) x /= sum;
  return w;
}

absl::Status add_source(MixtureSpec& spec, const std::string& flag, const std::string& name,
                        const std::string& dir, double weight) {
  if (name.empty())
    return absl::InvalidArgumentError(absl::StrCat(flag, ": a source has no name (NAME=DIR:WEIGHT)"));
  for (const MixtureSource& s : spec.sources)
    if (s.name == name)
      return absl::InvalidArgumentError(absl::StrCat(flag, ": source '", name, "' is given twice"));
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat(flag, ": source '", name, "': ", dir,
                                            " is not a directory; make it with `vtrain prepare`"));
  spec.sources.push_back({name, dir, weight});
  return absl::OkStatus();
}

absl::StatusOr<MixtureSpec> parse_inline(const std::string& data) {
  MixtureSpec spec;
  for (absl::string_view item : absl::StrSplit(data, ',', absl::SkipEmpty())) {
    const std::string s(item);
    const size_t eq = s.find('='), colon = s.rfind(':');
    if (eq == std::string::npos || colon == std::string::npos || colon < eq)
      return absl::InvalidArgumentError(absl::StrCat(
          "--data: '", s, "' is not NAME=DIR:WEIGHT (a mixture is NAME=DIR:WEIGHT,...; one "
          "data directory is its path, and this is not a directory)"));
    const std::string name = s.substr(0, eq), dir = s.substr(eq + 1, colon - eq - 1);
    VT_ASSIGN_OR_RETURN(double w, parse_weight("--data", name, s.substr(colon + 1)));
    VT_RETURN_IF_ERROR(add_source(spec, "--data", name, dir, w));
  }
  if (spec.sources.empty())
    return absl::InvalidArgumentError("--data: no source given");
  return spec;
}

absl::StatusOr<MixtureSpec> parse_file(const std::string& path,
                                       std::vector<std::string>* file_stages) {
  std::ifstream f(path);
  // A key given twice in one object is refused (JSON parsers keep one of them silently).
  std::vector<std::set<std::string>> keys;
  std::string twice;
  const nlohmann::json::parser_callback_t note_keys =
      [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (ev == E::object_start) keys.emplace_back();
        if (ev == E::object_end && !keys.empty()) keys.pop_back();
        if (ev == E::key && !keys.empty() && parsed.is_string() &&
            !keys.back().insert(parsed.get<std::string>()).second && twice.empty())
          twice = parsed.get<std::string>();
        return true;
      };
  const nlohmann::json j = nlohmann::json::parse(f, note_keys, false);
  const std::string flag = absl::StrCat("--data ", path);
  if (!twice.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the key \"", twice, "\" appears twice in one object (JSON would keep only one "
        "of them); write each key once"));
  if (j.is_discarded() || !j.is_object() || !j.contains("sources") || !j["sources"].is_array())
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": not a mixture file ({\"sources\": [{\"name\", \"dir\", \"weight\"}, ...], "
              "\"stages\": [{\"at_tokens\", \"weights\": {NAME: WEIGHT}}, ...]})"));
  const fs::path base = fs::path(path).parent_path();
  MixtureSpec spec;
  for (const auto& s : j["sources"]) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string() || !s.contains("dir") ||
        !s["dir"].is_string() || !s.contains("weight"))
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": source ", s.dump(), " needs \"name\", \"dir\" and \"weight\""));
    const std::string name = s["name"].get<std::string>();
    fs::path dir = s["dir"].get<std::string>();
    if (dir.is_relative()) dir = base / dir;
    const std::string wtext = s["weight"].is_number() ? s["weight"].dump()
                              : s["weight"].is_string() ? s["weight"].get<std::string>()
                                                        : s["weight"].dump();
    VT_ASSIGN_OR_RETURN(double w, parse_weight(flag, name, wtext));
    VT_RETURN_IF_ERROR(add_source(spec, flag, name, dir.string(), w));
  }
  if (spec.sources.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": no source"));
  if (j.contains("stages")) {
    if (!j["stages"].is_array())
      return absl::InvalidArgumentError(absl::StrCat(flag, ": \"stages\" is not a list"));
    for (const auto& st : j["stages"]) {
      if (!st.is_object() || !st.contains("at_tokens") || !st["at_tokens"].is_number() ||
          !st.contains("weights") || !st["weights"].is_object())
        return absl::InvalidArgumentError(absl::StrCat(
            flag, ": stage ", st.dump(), " needs \"at_tokens\" and \"weights\": {NAME: WEIGHT}"));
      std::vector<std::string> parts;
      for (const auto& [k, v] : st["weights"].items())
        parts.push_back(absl::StrCat(k, "=", v.is_string() ? v.get<std::string>() : v.dump()));
      file_stages->push_back(absl::StrCat(st["at_tokens"].dump(), ":", absl::StrJoin(parts, ",")));
    }
  }
  return spec;
}

absl::Status add_stage(MixtureSpec& spec, const std::string& text) {
  const std::string flag = absl::StrCat("--data-stage ", text);
  const size_t colon = text.find(':');
  if (colon == std::string::npos)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": not TOKENS:NAME=WEIGHT[,NAME=WEIGHT...] (e.g. 180e9:web=0.3,code=0.7)"));
  double at = 0;
  if (text.substr(0, colon).find_first_not_of("0123456789.eE+") != std::string::npos ||
      !absl::SimpleAtod(text.substr(0, colon), &at) || !std::isfinite(at) || at < 1 ||
      at > 9.2e18 || at != std::floor(at))
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the boundary '", text.substr(0, colon), "' is not a whole number of tokens >= 1"));
  const int64_t start = static_cast<int64_t>(at);
  if (start <= spec.stages.back().start_tokens)
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": stage boundaries must increase (the previous stage starts at ",
        spec.stages.back().start_tokens, " tokens)"));
  std::vector<double> w(spec.sources.size(), 0.0);
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text.substr(colon + 1), ',', absl::SkipEmpty())) {
    const std::string s(item);
    const size_t eq = s.find('=');
    const std::string name = s.substr(0, eq);
    size_t k = 0;
    while (k < spec.sources.size() && spec.sources[k].name != name) ++k;
    if (eq == std::string::npos || k == spec.sources.size())
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", s, "' does not name a source of --data as NAME=WEIGHT (sources: ",
                       absl::StrJoin(spec.names(), ", "), ")"));
    if (!seen.insert(name).second)
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", name, "' is given twice"));
    VT_ASSIGN_OR_RETURN(w[k], parse_weight(flag, name, s.substr(eq + 1)));
  }
  VT_ASSIGN_OR_RETURN(std::vector<double> norm, normalized(flag, std::move(w)));
  spec.stages.push_back({start, std::move(norm)});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MixtureSpec> parse_data_spec(const std::string& data,
                                            const std::vector<std::string>& stages) {
  std::error_code ec;
  MixtureSpec spec;
  std::vector<std::string> all_stages;
  if (fs::is_directory(data, ec)) {
    if (!stages.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "--data-stage needs a mixture (--data NAME=DIR:WEIGHT,...); --data ", data,
          " is one directory"));
    spec.sources.push_back({"", data, 1.0});
    spec.stages.push_back({0, {1.0}});
    return spec;
  }
  if (absl::EndsWith(data, ".json") && fs::is_regular_file(data, ec)) {
    VT_ASSIGN_OR_RETURN(spec, parse_file(data, &all_stages));
  } else if (data.find('=') != std::string::npos) {
    VT_ASSIGN_OR_RETURN(spec, parse_inline(data));
  } else {
    return absl::NotFoundError(absl::StrCat(
        "--data ", data, " is not a directory; make one with `vtrain prepare` (or give a mixture, "
        "NAME=DIR:WEIGHT,... or a mixture .json file)"));
  }
  std::vector<double> w;
  for (const MixtureSource& s : spec.sources) w.push_back(s.weight);
  VT_ASSIGN_OR_RETURN(std::vector<double> norm, normalized("--data", std::move(w)));
  spec.stages.push_back({0, std::move(norm)});
  all_stages.insert(all_stages.end(), stages.begin(), stages.end());
  for (const std::string& st : all_stages) VT_RETURN_IF_ERROR(add_stage(spec, st));
  return spec;
}

absl::Status check_same_tokenizer(const MixtureSpec& spec) {
  auto read = [](const std::string& dir) -> std::string {
    std::ifstream f(fs::path(dir) / kTokenizerFile, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return f ? ss.str() : std::string();
  };
  for (const MixtureSource& s : spec.sources)
    if (read(s.dir).empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "--data: source '", s.name, "' (", s.dir, ") is not a prepared data directory (no ",
          kTokenizerFile, "); make it with vtrain prepare --out ", s.dir,
          spec.sources.size() > 1 && s.dir != spec.sources[0].dir
              ? absl::StrCat(" --tokenizer from:", spec.sources[0].dir)
              : std::string()));
  const std::string first = read(spec.sources[0].dir);
  for (size_t k = 1; k < spec.sources.size(); ++k)
    if (read(spec.sources[k].dir) != first)
      return absl::InvalidArgumentError(absl::StrCat(
          "--data: source '", spec.sources[k].name, "' (", spec.sources[k].dir,
          ") has another tokenizer than '", spec.sources[0].name, "' (", spec.sources[0].dir,
          "); prepare every source with one tokenizer: vtrain prepare --tokenizer from:",
          spec.sources[0].dir));
  return absl::OkStatus();
}

absl::Status check_stages_fit(const MixtureSpec& spec, int64_t run_tokens, int64_t row_tokens) {
  const int64_t last = spec.stages.back().start_tokens;
  if (spec.stages.size() > 1 && last >= run_tokens)
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-stage at ", last, " tokens is beyond the run, which trains ", run_tokens,
        " tokens (--steps x --global-batch)"));
  if (spec.stages.size() > 1 && last > run_tokens - row_tokens)
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-stage at ", last, " tokens would never take effect: the run's last row (of ",
        row_tokens, " tokens) starts at ", run_tokens - row_tokens, " tokens, and a row takes "
        "its source from the stage where it starts; choose a boundary at most ",
        run_tokens - row_tokens));
  return absl::OkStatus();
}

absl::StatusOr<MixtureLoader> MixtureLoader::open(const MixtureSpec& spec, const std::string& split,
                                                  const LoaderOptions& opts) {
  MixtureLoader m;
  m.spec_ = spec;
  for (const MixtureSource& s : spec.sources) {
    auto dl = DataLoader::open(s.dir, split, opts);
    if (!dl.ok())
      return absl::Status(dl.status().code(),
                          absl::StrCat("--data source '", s.name, "': ", dl.status().message()));
    m.paths_.insert(m.paths_.end(), dl->shard_paths().begin(), dl->shard_paths().end());
    m.loaders_.push_back(std::move(*dl));
  }
  for (size_t k = 1; k < m.loaders_.size(); ++k)
    if (m.loaders_[k].vocab_size() != m.loaders_[0].vocab_size())
      return absl::InvalidArgumentError(absl::StrCat(
          "--data: source '", spec.sources[k].name, "' has vocabulary ", m.loaders_[k].vocab_size(),
          ", '", spec.sources[0].name, "' ", m.loaders_[0].vocab_size()));
  m.credits_.assign(spec.sources.size(), 0.0);
  m.source_tokens_.assign(spec.sources.size(), 0);
  return m;
}

int64_t MixtureLoader::tokens_per_epoch() const {
  int64_t n = 0;
  for (const DataLoader& l : loaders_) n += l.tokens_per_epoch();
  return n;
}

size_t MixtureLoader::pick(int64_t row_start_tokens) {
  while (stage_ + 1 < spec_.stages.size() &&
         spec_.stages[stage_ + 1].start_tokens <= row_start_tokens) {
    ++stage_;
    std::fill(credits_.begin(), credits_.end(), 0.0);
  }
  const std::vector<double>& w = spec_.stages[stage_].weights;
  size_t best = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    credits_[k] += w[k];
    if (credits_[k] > credits_[best]) best = k;
  }
  credits_[best] -= 1.0;
  return best;
}

absl::Status MixtureLoader::next_batch_into(int64_t global_rows, int64_t seq_len, int dp_rank,
                                            int dp_size, int32_t* inputs, int32_t* targets) {
  if (global_rows <= 0 || dp_size <= 0 || global_rows % dp_size != 0)
    return absl::InvalidArgumentError(absl::StrCat("a mixture batch of ", global_rows,
                                                   " rows does not split over ", dp_size, " ranks"));
  const size_t K = loaders_.size();
  std::vector<size_t> from(global_rows);
  std::vector<int64_t> count(K, 0);
  for (int64_t r = 0; r < global_rows; ++r) {
    from[r] = pick(tokens_ + r * seq_len);
    ++count[from[r]];
  }
  // Each source's rows, read as one batch of its own stream (every rank reads the whole global
  // batch and keeps its rows: the state then moves alike everywhere).
  std::vector<int64_t> first(K, 0);
  int64_t total = 0;
  for (size_t k = 0; k < K; ++k) first[k] = total, total += count[k];
  in_buf_.resize(total * seq_len);
  tg_buf_.resize(total * seq_len);
  for (size_t k = 0; k < K; ++k) {
    if (count[k] == 0) continue;
    absl::Status st = loaders_[k].next_batch_into(count[k], seq_len, 0, 1,
                                                  in_buf_.data() + first[k] * seq_len,
                                                  tg_buf_.data() + first[k] * seq_len);
    if (!st.ok())
      return absl::Status(st.code(), absl::StrCat("--data source '", spec_.sources[k].name,
                                                  "': ", st.message()));
    source_tokens_[k] += count[k] * seq_len;
  }
  const int64_t local = global_rows / dp_size, begin = dp_rank * local;
  std::vector<int64_t> next(first);
  for (int64_t r = 0; r < global_rows; ++r) {
    const int64_t at = next[from[r]]++;
    if (r < begin || r >= begin + local) continue;
    std::copy_n(in_buf_.data() + at * seq_len, seq_len, inputs + (r - begin) * seq_len);
    std::copy_n(tg_buf_.data() + at * seq_len, seq_len, targets + (r - begin) * seq_len);
  }
  tokens_ += global_rows * seq_len;
  return absl::OkStatus();
}

nlohmann::json MixtureLoader::state_json() const {
  nlohmann::json j = {{"mixture", 1}, {"tokens", tokens_}, {"stage", stage_}};
  for (size_t k = 0; k < loaders_.size(); ++k) {
    const std::string& n = spec_.sources[k].name;
    j["weights"][n] = spec_.stages[stage_].weights[k];
    j["credits"][n] = credits_[k];
    j["sources"][n] = {{"tokens", source_tokens_[k]}, {"loader", loaders_[k].state_json()}};
  }
  return j;
}

absl::Status MixtureLoader::load_state_json(const nlohmann::json& j) {
  notes_.clear();
  if (!j.is_object() || !j.contains("mixture") || !j.contains("sources") ||
      !j["sources"].is_object() || !j.contains("tokens") || !json_integer_if<int64_t>(j["tokens"]))
    return absl::InvalidArgumentError(
        "the checkpoint's loader state is not a mixture's (it was trained on one data "
        "directory): resume it with that --data, or start the mixture from scratch");
  tokens_ = *json_integer_if<int64_t>(j["tokens"]);
  stage_ = 0;
  while (stage_ + 1 < spec_.stages.size() && spec_.stages[stage_ + 1].start_tokens <= tokens_)
    ++stage_;
  bool same_weights = j.contains("weights") && j["weights"].is_object() &&
                      j["weights"].size() == loaders_.size() && j.contains("credits") &&
                      j["credits"].is_object();
  for (size_t k = 0; k < loaders_.size(); ++k) {
    const std::string& n = spec_.sources[k].name;
    source_tokens_[k] = 0;
    credits_[k] = 0;
    if (!j["sources"].contains(n)) {
      notes_.push_back(absl::StrCat("source '", n, "' is new: it starts at its beginning"));
      same_weights = false;
      continue;
    }
    const nlohmann::json& s = j["sources"][n];
    if (!s.is_object() || !s.contains("loader") || !s.contains("tokens") ||
        !json_integer_if<int64_t>(s["tokens"]))
      return absl::DataLossError(absl::StrCat("the checkpoint's state of source '", n, "' is malformed"));
    absl::Status st = loaders_[k].load_state_json(s["loader"]);
    if (!st.ok())
      return absl::Status(st.code(), absl::StrCat("--data source '", n, "': ", st.message()));
    source_tokens_[k] = *json_integer_if<int64_t>(s["tokens"]);
    if (same_weights) {
      const auto w = j["weights"].find(n);
      const auto c = j["credits"].find(n);
      if (w == j["weights"].end() || !w->is_number() || c == j["credits"].end() ||
          !c->is_number() || w->get<double>() != spec_.stages[stage_].weights[k])
        same_weights = false;
      else
        credits_[k] = c->get<double>();
    }
  }
  for (const auto& [n, s] : j["sources"].items()) {
    bool listed = false;
    for (const MixtureSource& src : spec_.sources) listed |= src.name == n;
    if (!listed)
      notes_.push_back(absl::StrCat("source '", n, "' of the checkpoint is not in --data: dropped (",
                                    s.value("tokens", int64_t{0}), " tokens read from it)"));
  }
  if (!same_weights) {
    std::fill(credits_.begin(), credits_.end(), 0.0);
    notes_.push_back(absl::StrCat("the weights changed: now ", spec_.describe_stage(stage_),
                                  "; every source continues where it stopped"));
  }
  return absl::OkStatus();
}

nlohmann::json MixtureLoader::tokens_by_source() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 0; k < loaders_.size(); ++k) j[spec_.sources[k].name] = source_tokens_[k];
  return j;
}

}  // namespace vt::data
