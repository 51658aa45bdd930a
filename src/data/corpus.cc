// Input discovery (files, directories, globs), format resolution, units and their assignment to
// ranks (see corpus.h).
#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace vt::data {
namespace fs = std::filesystem;

absl::StatusOr<InputFormat> resolve_format(const std::string& name, const std::string& format) {
  if (format == "jsonl") return InputFormat::kJsonl;
  if (format == "text") return InputFormat::kText;
  if (format == "parquet") return InputFormat::kParquet;
  if (format != "auto")
    return absl::InvalidArgumentError(absl::StrCat("--format ", format, ": expected auto, jsonl, text or parquet"));
  std::string base = name;
  for (const char* z : {".gz", ".zst", ".zstd"})
    if (absl::EndsWith(base, z)) base.resize(base.size() - std::string(z).size());
  if (absl::EndsWith(base, ".parquet")) return InputFormat::kParquet;  // x.parquet.gz is refused there
  for (const char* j : {".jsonl", ".json", ".ndjson"})
    if (absl::EndsWith(base, j)) return InputFormat::kJsonl;
  return InputFormat::kText;
}

absl::StatusOr<std::vector<InputFile>> list_input_files(const std::vector<std::string>& inputs,
                                                        const std::string& format) {
  if (inputs.empty()) return absl::InvalidArgumentError("prepare: no --input given");
  std::vector<std::string> paths;
  for (const std::string& in : inputs) {
    if (in.find_first_of("*?[") != std::string::npos && !fs::exists(in)) {
      glob_t g;
      const int rc = ::glob(in.c_str(), 0, nullptr, &g);
      if (rc == GLOB_NOMATCH) {
        return absl::NotFoundError(absl::StrCat("prepare: input pattern ", in, " matches no file"));
      }
      if (rc != 0) return absl::InternalError(absl::StrCat("prepare: cannot expand ", in));
      std::vector<std::string> matched;
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i])) matched.emplace_back(g.gl_pathv[i]);
      globfree(&g);
      if (matched.empty())
        return absl::NotFoundError(absl::StrCat("prepare: input pattern ", in, " matches no regular file"));
      std::sort(matched.begin(), matched.end());
      paths.insert(paths.end(), matched.begin(), matched.end());
      continue;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st))
      return absl::NotFoundError(absl::StrCat("prepare: input ", in, " does not exist; check the path"));
    if (fs::is_directory(st)) {
      std::vector<std::string> in_dir;
      for (const auto& e : fs::directory_iterator(in, ec)) {
        const std::string name = e.path().filename().string();
        if (!name.empty() && name[0] != '.' && e.is_regular_file()) in_dir.push_back(e.path().string());
      }
      if (ec) return absl::InternalError(absl::StrCat("prepare: cannot list directory ", in));
      if (in_dir.empty())
        return absl::InvalidArgumentError(absl::StrCat("prepare: input directory ", in, " has no regular files"));
      std::sort(in_dir.begin(), in_dir.end());
      paths.insert(paths.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(st)) {
      paths.push_back(in);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("prepare: input ", in,
                                                     " is neither a regular file nor a directory"));
    }
  }
  std::vector<InputFile> files;
  files.reserve(paths.size());
  for (const std::string& p : paths) {
    InputFile f;
    f.path = p;
    f.bytes = static_cast<int64_t>(fs::file_size(p));
    VT_ASSIGN_OR_RETURN(f.compression, sniff_compression(p));
    VT_ASSIGN_OR_RETURN(f.format, resolve_format(p, format));
    files.push_back(std::move(f));
  }
  return files;
}

std::vector<Unit> plan_units(const std::vector<InputFile>& files, int64_t unit_bytes) {
  std::vector<Unit> units;
  for (int i = 0; i < static_cast<int>(files.size()); ++i) {
    const InputFile& f = files[i];
    if (f.compression == Compression::kNone && f.format == InputFormat::kJsonl &&
        f.bytes > unit_bytes) {
      for (int64_t b = 0; b < f.bytes; b += unit_bytes)
        units.push_back({i, b, std::min(f.bytes, b + unit_bytes), std::min(unit_bytes, f.bytes - b)});
    } else {
      units.push_back({i, 0, -1, f.bytes});
    }
  }
  return units;
}

std::vector<int> units_of_rank(const std::vector<Unit>& units, int rank, int ranks) {
  // Largest first, each to the least loaded rank (ties: lowest rank); the same on every rank.
  std::vector<int> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return units[a].weight > units[b].weight; });
  std::vector<int64_t> load(ranks, 0);
  std::vector<int> mine;
  for (int u : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += units[u].weight + 1;
    if (r == rank) mine.push_back(u);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

}  // namespace vt::data
