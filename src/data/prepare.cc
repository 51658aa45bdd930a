// Implementation of `vtrain prepare` (see prepare.h for the directory contract): argument parsing,
// the scratch directory and its safe move into --out, the order of the collective steps
// (prepare_steps.h), the train/val split and meta.json.
#include "data/prepare.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cstring>
#include <iostream>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/file_safety.h"
#include "core/output_lock.h"
#include "core/flags.h"
#include "data/prepare_group.h"
#include "data/prepare_steps.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace vt::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kTmpMarker = ".vtrain-prepare-tmp";
constexpr const char* kCreatedBy = "vtrain prepare";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text) || !f.flush()) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string(), " (disk full?)"));
  }
  return absl::OkStatus();
}

bool made_by_prepare(const fs::path& dir) {
  std::ifstream f(dir / kMetaFile);
  if (!f) return false;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return !j.is_discarded() && j.is_object() && j.contains("created_by") &&
         j["created_by"].is_string() && j["created_by"].get<std::string>() == kCreatedBy;
}

// Files prepare owns inside a data directory.
bool is_prepare_output(const std::string& name) {
  auto shard = [&](const char* prefix) {
    return name.rfind(prefix, 0) == 0 && name.size() > 4 && name.ends_with(".bin");
  };
  return name == kMetaFile || name == kTokenizerFile || name == kTokenBytesFile ||
         shard("train_") || shard("val_");
}

// Moves the finished scratch directory into place (see prepare.h: Safety).
absl::Status install(const fs::path& tmp, const fs::path& out) {
  std::error_code ec;
  if (!fs::exists(out)) {
    fs::rename(tmp, out, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot move ", tmp.string(), " to ", out.string(), ": ", ec.message()));
    return absl::OkStatus();
  }
  fs::remove(out / kMetaFile, ec);  // first, so a half-replaced directory is never taken as valid
  for (const auto& e : fs::directory_iterator(out)) {
    if (is_prepare_output(e.path().filename().string())) fs::remove(e.path(), ec);
  }
  std::vector<fs::path> moved;
  for (const auto& e : fs::directory_iterator(tmp)) moved.push_back(e.path());
  std::sort(moved.begin(), moved.end(), [](const fs::path& a, const fs::path& b) {
    // meta.json last
    return (a.filename() == kMetaFile) < (b.filename() == kMetaFile) ||
           ((a.filename() == kMetaFile) == (b.filename() == kMetaFile) && a < b);
  });
  for (const fs::path& p : moved) {
    fs::rename(p, out / p.filename(), ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot move ", p.string(), " into ", out.string(), ": ", ec.message()));
  }
  fs::remove(tmp, ec);
  return absl::OkStatus();
}

// Copies standard input into the scratch directory (it is read twice: sample, then encoding).
absl::StatusOr<std::string> spool_stdin(const fs::path& tmp) {
  const fs::path p = tmp / "stdin.input";
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  std::vector<char> buf(1 << 20);
  while (std::cin.read(buf.data(), static_cast<std::streamsize>(buf.size())) || std::cin.gcount() > 0)
    f.write(buf.data(), std::cin.gcount());
  if (!f.flush()) return absl::InternalError(absl::StrCat("cannot copy stdin to ", p.string(), " (disk full?)"));
  return p.string();
}

// Phase 1, the inputs: stdin is copied into the scratch directory by rank 0 (one rank only,
// checked by the caller); rank 0 lists (and sniffs) the inputs once and the other ranks get the
// list; the list is cut into units of work and this rank's units are picked.
absl::Status list_inputs(PrepareContext& ctx) {
  const PrepareOptions& opts = *ctx.opts;
  PrepareGroup& group = *ctx.group;
  std::vector<std::string> inputs = opts.inputs;
  for (std::string& in : inputs) {
    if (in != "-") continue;
    VT_ASSIGN_OR_RETURN(in, spool_stdin(ctx.tmp));
  }
  absl::StatusOr<std::vector<InputFile>> files = std::vector<InputFile>{};
  if (ctx.rank0()) files = list_input_files(inputs, opts.format);
  VT_RETURN_IF_ERROR(group.agree(files.status()));
  std::string listing;  // per file: int64 path length, path, int64 bytes, compression, format
  auto put = [&](int64_t v) { listing.append(reinterpret_cast<const char*>(&v), 8); };
  if (ctx.rank0())
    for (const InputFile& f : *files) {
      put(static_cast<int64_t>(f.path.size()));
      listing += f.path;
      put(f.bytes);
      put(static_cast<int64_t>(f.compression));
      put(static_cast<int64_t>(f.format));
    }
  group.broadcast_bytes(listing);
  size_t at = 0;
  auto get = [&]() {
    int64_t v = 0;
    std::memcpy(&v, listing.data() + at, 8);
    at += 8;
    return v;
  };
  while (at < listing.size()) {
    InputFile f;
    const int64_t n = get();
    f.path = listing.substr(at, static_cast<size_t>(n));
    at += static_cast<size_t>(n);
    f.bytes = get();
    f.compression = static_cast<Compression>(get());
    f.format = static_cast<InputFormat>(get());
    ctx.files.push_back(std::move(f));
  }
  const std::string stdin_format = opts.format == "auto" ? "jsonl" : opts.format;
  for (InputFile& f : ctx.files)
    if (f.path == (ctx.tmp / "stdin.input").string()) {
      VT_ASSIGN_OR_RETURN(f.format, resolve_format("stdin.jsonl", stdin_format));
    }
  ctx.units = plan_units(ctx.files, opts.unit_bytes);
  ctx.mine = units_of_rank(ctx.units, group.rank(), group.size());
  return absl::OkStatus();
}

int64_t input_bytes_of(const PrepareContext& ctx) {
  int64_t bytes = 0;
  for (const InputFile& f : ctx.files) bytes += f.bytes;
  return bytes;
}

// Phase 2, the tokenizer: built (or trained on the sample) collectively, saved by rank 0 into the
// scratch directory, whose units/ folder the encoding fills next.
absl::StatusOr<std::unique_ptr<Tokenizer>> make_tokenizer(const PrepareContext& ctx) {
  absl::Status st;
  if (ctx.rank0()) {
    std::error_code ec;
    fs::create_directories(ctx.tmp / "units", ec);
    if (ec) st = absl::InternalError(absl::StrCat("cannot create ", (ctx.tmp / "units").string(), ": ", ec.message()));
  }
  VT_RETURN_IF_ERROR(ctx.group->agree(st));
  VT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, build_tokenizer(ctx));
  VT_CHECK(tok->bos_id() >= 0);
  if (ctx.rank0()) st = tok->save((ctx.tmp / kTokenizerFile).string());
  VT_RETURN_IF_ERROR(ctx.group->agree(st));
  return tok;
}

// The whole stream's counts, from every unit's.
UnitStats sum_stats(const std::vector<UnitStats>& stats) {
  UnitStats all;
  for (const UnitStats& s : stats) {
    all.docs += s.docs;
    all.tokens += s.tokens;
    all.skipped += s.skipped;
    all.text_bytes += s.text_bytes;
    all.dropped_files += s.dropped_files;
  }
  return all;
}

// Phase 3 planned: the train/val split of the `total`-token stream (prepare.h, "Split") and the
// shard names of each side.
absl::StatusOr<SplitPlan> plan_split(const PrepareOptions& opts, int64_t total) {
  SplitPlan plan;
  if (opts.val_fraction > 0) {
    plan.n_val = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(opts.val_fraction * total)));
  }
  plan.n_train = total - plan.n_val;
  if (plan.n_train < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prepare: the inputs give only %d tokens, too few for a training split of >= 2 tokens%s; "
        "add more text or lower --val-fraction",
        total, plan.n_val > 0 ? absl::StrFormat(" after %d validation tokens", plan.n_val) : ""));
  }
  auto names = [&](const char* prefix, int64_t count) {
    std::vector<std::string> v;
    for (int64_t k = 0; k * opts.shard_tokens < count; ++k) v.push_back(absl::StrFormat("%s_%06d.bin", prefix, k));
    return v;
  };
  plan.train_shards = names("train", plan.n_train);
  plan.val_shards = names("val", plan.n_val);
  return plan;
}

// meta.json's contents (prepare.h, "Data directory").
nlohmann::json meta_json(const PrepareContext& ctx, const Tokenizer& tok, const UnitStats& all,
                         const SplitPlan& plan) {
  const PrepareOptions& opts = *ctx.opts;
  nlohmann::json meta;
  meta["format"] = "vtrain-data";
  meta["version"] = 1;
  meta["created_by"] = kCreatedBy;
  meta["tokenizer"] = {{"spec", opts.tokenizer}, {"kind", tok.kind()}, {"vocab_size", tok.vocab_size()},
                       {"bos_id", tok.bos_id()}, {"file", kTokenizerFile}};
  meta["token_bytes"] = kTokenBytesFile;
  meta["token_width"] = shard_token_width(tok.vocab_size());
  std::vector<std::string> input_names;
  for (const InputFile& f : ctx.files)
    input_names.push_back(f.path == (ctx.tmp / "stdin.input").string() ? "-" : f.path);
  meta["inputs"] = input_names;
  meta["input_format"] = opts.format;
  meta["text_field"] = opts.text_field;
  meta["documents"] = all.docs;
  meta["skipped_records"] = all.skipped;
  meta["skipped_files"] = all.dropped_files;
  meta["input_bytes"] = input_bytes_of(ctx);
  meta["text_bytes"] = all.text_bytes;
  meta["shuffle_seed"] = opts.shuffle_seed;
  meta["tokenizer_sample_bytes"] = opts.tokenizer_sample_bytes;
  meta["unit_bytes"] = opts.unit_bytes;
  meta["val_fraction"] = opts.val_fraction;
  meta["shard_tokens"] = opts.shard_tokens;
  meta["train"] = {{"tokens", plan.n_train}, {"shards", plan.train_shards}};
  meta["val"] = {{"tokens", plan.n_val}, {"shards", plan.val_shards}};
  return meta;
}

// Phase 4, on rank 0: the scratch directory loses its work files and gains token_bytes.bin and
// meta.json (last), then moves into --out.
absl::Status finish_directory(const PrepareContext& ctx, const Tokenizer& tok, const UnitStats& all,
                              const SplitPlan& plan, const fs::path& out) {
  const fs::path& tmp = ctx.tmp;
  std::error_code ec;
  fs::remove_all(tmp / "units", ec);
  fs::remove(tmp / "stdin.input", ec);
  absl::Status st;
  const std::vector<int32_t> tb = token_bytes_table(tok);
  {
    std::ofstream f(tmp / kTokenBytesFile, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(tb.data()), static_cast<std::streamsize>(tb.size() * 4));
    if (!f.flush()) st = absl::InternalError("cannot write token_bytes.bin (disk full?)");
  }
  const nlohmann::json meta = meta_json(ctx, tok, all, plan);
  fs::remove(tmp / kTmpMarker, ec);
  if (st.ok()) st = write_text(tmp / kMetaFile, meta.dump(2) + "\n");
  if (st.ok()) st = install(tmp, out);
  return st;
}

// The collective steps in order: inputs, tokenizer, encoding (prepare_tokenize.cc), split and
// shards (prepare_assemble.cc), then rank 0 finishes and installs the directory.
absl::Status run(const PrepareOptions& opts, PrepareGroup& group, const fs::path& out,
                 const fs::path& tmp) {
  const auto t0 = std::chrono::steady_clock::now();
  PrepareContext ctx;
  ctx.opts = &opts;
  ctx.group = &group;
  ctx.tmp = tmp;
  const bool verbose = ctx.verbose();
  VT_RETURN_IF_ERROR(list_inputs(ctx));
  if (verbose) {
    std::printf("prepare: %zu input file(s), %.2f MB on disk, %zu unit(s) over %d rank(s) -> %s "
                "(tokenizer %s)\n",
                ctx.files.size(), input_bytes_of(ctx) / 1e6, ctx.units.size(), group.size(),
                out.string().c_str(), opts.tokenizer.c_str());
    std::fflush(stdout);
  }

  VT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, make_tokenizer(ctx));
  if (verbose) {
    std::printf("prepare: tokenizer %s, vocab %d, bos %d (%.1fs)\n", tok->kind().c_str(),
                tok->vocab_size(), tok->bos_id(), seconds_since(t0));
    std::fflush(stdout);
  }

  const auto t_enc = std::chrono::steady_clock::now();
  VT_ASSIGN_OR_RETURN(std::vector<UnitStats> stats, tokenize_units(ctx, *tok));
  const UnitStats all = sum_stats(stats);
  const int64_t total = all.tokens + all.docs;  // one <|bos|> per document
  if (verbose) {
    const double secs = seconds_since(t_enc);
    std::printf("prepare: encoded %lld documents, %.2f MB of text -> %lld tokens (%.2f bytes/token) "
                "in %.1fs: %.2f MB/s over %d rank(s)%s\n",
                static_cast<long long>(all.docs), all.text_bytes / 1e6, static_cast<long long>(total),
                all.tokens ? static_cast<double>(all.text_bytes) / all.tokens : 0.0, secs,
                all.text_bytes / 1e6 / std::max(secs, 1e-9), group.size(),
                all.skipped || all.dropped_files
                    ? absl::StrCat("; left out: ", all.skipped, " bad record(s), ", all.dropped_files,
                                   " damaged file(s)").c_str()
                    : "");
    std::fflush(stdout);
  }

  VT_ASSIGN_OR_RETURN(const SplitPlan plan, plan_split(opts, total));
  const auto t_write = std::chrono::steady_clock::now();
  VT_RETURN_IF_ERROR(write_shards(ctx, stats, *tok, plan));
  if (verbose) {
    std::printf("prepare: wrote %zu shard(s)%s in %.1fs\n", plan.train_shards.size() + plan.val_shards.size(),
                opts.shuffle_seed ? absl::StrCat(" (documents shuffled, seed ", opts.shuffle_seed, ")").c_str() : "",
                seconds_since(t_write));
    std::fflush(stdout);
  }
  if (!ctx.rank0()) return group.agree(absl::OkStatus());  // rank 0 installs below

  const absl::Status st = finish_directory(ctx, *tok, all, plan, out);
  if (st.ok() && verbose) {
    std::printf("prepare: wrote %s: train %lld tokens in %zu shard(s), val %lld tokens in %zu "
                "shard(s), vocab %d (%.1fs)\n",
                out.string().c_str(), static_cast<long long>(plan.n_train), plan.train_shards.size(),
                static_cast<long long>(plan.n_val), plan.val_shards.size(), tok->vocab_size(),
                seconds_since(t0));
    std::fflush(stdout);
  }
  return group.agree(st);
}

}  // namespace

const CommandSpec& prepare_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain prepare";
    c.synopsis =
        "vtrain prepare --input FILE|DIR|'GLOB'|- [more ...] --out DATADIR\n"
        "                      --tokenizer bytes|bpe:N|tiktoken:FILE|from:DATADIR [options]";
    c.flags = {
        required(list_flag("input",
                           "files, directories, quoted globs ('shards/*.jsonl.zst', "
                           "'shards/*.parquet'), or - (stdin); .gz and .zst inputs are "
                           "decompressed (told by their first bytes)")),
        required(text_flag("out", "", "the data directory to write")),
        required(text_flag("tokenizer", "",
                           "bytes, bpe:N (trained here), tiktoken:FILE, or from:DATADIR (that "
                           "data directory's tokenizer, or a tokenizer.json: the sources of a "
                           "mixture share one)")),
        choice_flag("format", "auto", {"auto", "jsonl", "text", "parquet"},
                    "auto: .jsonl/.json/.ndjson[.gz|.zst] and stdin are JSON lines (one document "
                    "per record), .parquet files Parquet (one document per row), other files "
                    "one document each"),
        text_flag("text-field", "text",
                  "the JSON field, or the Parquet column, holding a document's text"),
        choice_flag("on-bad-record", "fail", {"fail", "skip"},
                    "fail: stop at the first bad record or corrupt stream, naming file and line, "
                    "leaving --out untouched; skip: warn, leave it out, count it in meta.json"),
        int_flag("max-document-bytes", 67108864, 1024, 4294967296,
                 "the longest document (a JSON record, a Parquet value or a text file); a longer "
                 "one is a bad record (see --on-bad-record), never held in memory whole"),
        num_flag("val-fraction", 0.05, 0, 1,
                 "the last max(2, ceil(F*N)) tokens are validation (below 1; 0: no validation split)"),
        int_flag("shard-tokens", 100000000, 1, 2147483646, "tokens per shard"),
        int_flag("shuffle-seed", 0, 0, 9.2e18, "put the documents in a seeded random order (0: input order)"),
        int_flag("tokenizer-sample-bytes", 2000000000, 1, 9.2e18,
                 "bpe:N trains on this much text, a deterministic sample spread over the inputs"),
        int_flag("unit-bytes", 67108864, 1, 9.2e18,
                 "plain JSON-lines files are split into units of N bytes for the ranks"),
        int_flag("threads", 0, 0, 4096, "encoding threads per rank (0: OMP_NUM_THREADS or all cores)"),
        bool_flag("force", "replace the data files of a non-empty --out not made by prepare"),
        bool_flag("quiet", "no progress lines"),
    };
    c.epilog =
        "Under mpirun (-np N, any number of nodes sharing the file system of --out) the work is split\n"
        "over the ranks and the output is byte for byte the one of a single process.\n";
    return c;
  }();
  return spec;
}

std::string prepare_usage() { return usage(prepare_command()); }

absl::StatusOr<PrepareOptions> parse_prepare_args(const std::vector<std::string>& args) {
  VT_ASSIGN_OR_RETURN(Flags f, Flags::parse(prepare_command(), args));
  PrepareOptions o;
  o.inputs = f.get_list("input");
  o.out_dir = f.get_string("out");
  o.tokenizer = f.get_string("tokenizer");
  o.format = f.get_string("format");
  o.text_field = f.get_string("text-field");
  o.skip_bad_records = f.get_string("on-bad-record") == "skip";
  o.max_document_bytes = f.get_int("max-document-bytes");
  o.val_fraction = f.get_double("val-fraction");
  if (o.val_fraction >= 1)
    return absl::InvalidArgumentError(absl::StrCat("--val-fraction ", o.val_fraction,
                                                   ": expected a fraction below 1"));
  o.shard_tokens = f.get_int("shard-tokens");
  o.shuffle_seed = static_cast<uint64_t>(f.get_int("shuffle-seed"));
  o.tokenizer_sample_bytes = f.get_int("tokenizer-sample-bytes");
  o.unit_bytes = f.get_int("unit-bytes");
  o.threads = static_cast<int>(f.get_int("threads"));
  o.force = f.get_bool("force");
  o.verbose = !f.get_bool("quiet");
  return o;
}

namespace {

// The exclusive lock of one --out (core/output_lock.h): rank 0 takes "<out>.prepare-lock" for the
// whole job, before anything is written, so two prepare runs never build or swap the same
// directory at once; the folder of --out is made first.
absl::Status lock_out(OutputLock& lock, const fs::path& out) {
  std::error_code ec;
  const fs::path parent = fs::absolute(out, ec).parent_path();
  if (!fs::is_directory(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec)
      return absl::PermissionDeniedError(absl::StrCat("prepare: --out ", out.string(), ": ",
                                                      write_error(parent.string(), ec.value())));
  }
  absl::Status st = lock.acquire(out.string() + ".prepare-lock", out.string(), "prepare");
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("prepare: ", st.message()));
}

// Rank 0: checks --out and makes a fresh scratch directory.
absl::Status make_scratch(const PrepareOptions& opts, const fs::path& out, const fs::path& tmp) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out)) {
      return absl::AlreadyExistsError(absl::StrCat("prepare: --out ", out.string(), " exists and is not a directory"));
    }
    if (!fs::is_empty(out) && !opts.force && !made_by_prepare(out)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "prepare: --out ", out.string(), " is not empty and was not made by vtrain prepare (no meta.json "
          "from it); choose another directory or pass --force to replace the data files in it"));
    }
    for (const std::string& in : opts.inputs) {
      if (fs::exists(in) && fs::equivalent(in, out, ec)) {
        return absl::InvalidArgumentError(absl::StrCat("prepare: --out ", out.string(), " is also an --input"));
      }
    }
  }
  if (fs::exists(tmp)) {
    if (!fs::exists(tmp / kTmpMarker)) {
      return absl::AlreadyExistsError(absl::StrCat("prepare: ", tmp.string(),
                                                   " exists and is not a leftover of prepare; move it away"));
    }
    fs::remove_all(tmp, ec);
  }
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("prepare: cannot create ", tmp.string(), ": ", ec.message()));
  return write_text(tmp / kTmpMarker, "scratch directory of vtrain prepare\n");
}

}  // namespace

absl::Status prepare_data(const PrepareOptions& opts) {
  std::unique_ptr<PrepareGroup> one = make_single_group();
  return prepare_data(opts, *one);
}

absl::Status prepare_data(const PrepareOptions& opts, PrepareGroup& group) {
  if (opts.out_dir.empty()) return absl::InvalidArgumentError("prepare: --out is required");
  if (!(opts.val_fraction >= 0 && opts.val_fraction < 1)) {
    return absl::InvalidArgumentError("prepare: --val-fraction must be in [0, 1)");
  }
  if (opts.shard_tokens < 1 || opts.shard_tokens > INT32_MAX) {
    return absl::InvalidArgumentError("prepare: --shard-tokens must be in [1, 2^31)");
  }
  if (group.size() > 1 && std::count(opts.inputs.begin(), opts.inputs.end(), "-") > 0)
    return absl::InvalidArgumentError(
        "prepare: --input - (stdin) is read by one process; run it without mpirun, or write the "
        "stream to files first");
  if (std::count(opts.inputs.begin(), opts.inputs.end(), "-") > 1)
    return absl::InvalidArgumentError("prepare: --input - (stdin) can be given once");
  fs::path out = fs::path(opts.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // trailing slash
  const fs::path tmp = fs::path(out.string() + ".prepare-tmp");
  absl::Status st;
  OutputLock lock;  // rank 0's, held until every rank has returned from the last agree below
  if (group.rank() == 0) {
    try {
      st = lock_out(lock, out);
      if (st.ok()) st = make_scratch(opts, out, tmp);
    } catch (const fs::filesystem_error& e) {
      st = absl::InternalError(absl::StrCat("prepare: file system error: ", e.what()));
    }
  }
  VT_RETURN_IF_ERROR(group.agree(st));
  try {
    st = run(opts, group, out, tmp);
  } catch (const fs::filesystem_error& e) {
    st = absl::InternalError(absl::StrCat("prepare: file system error: ", e.what()));
  }
  // Every rank is past its last write once run() has agreed on a status.
  std::error_code ec;
  if (!st.ok() && group.rank() == 0) fs::remove_all(tmp, ec);
  return st;
}

}  // namespace vt::data
