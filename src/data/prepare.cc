// Implementation of `vtrain prepare` (see prepare.h for the directory contract): argument parsing,
// input discovery, tokenizer creation (bytes / bpe training / tiktoken), streaming tokenization
// into a scratch file, the train/val split into shards, and the safe move into --out.
#include "data/prepare.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
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
#include "data/bpe_trainer.h"
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

absl::StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read input file ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text) || !f.flush()) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string(), " (disk full?)"));
  }
  return absl::OkStatus();
}

// Files in the order they form the token stream.
absl::StatusOr<std::vector<std::string>> list_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) return absl::InvalidArgumentError("prepare: no --input given");
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st)) {
      return absl::NotFoundError(absl::StrCat("prepare: input ", in, " does not exist; check the path"));
    }
    if (fs::is_directory(st)) {
      std::vector<std::string> in_dir;
      for (const auto& e : fs::directory_iterator(in, ec)) {
        const std::string name = e.path().filename().string();
        if (!name.empty() && name[0] != '.' && e.is_regular_file()) in_dir.push_back(e.path().string());
      }
      if (ec) return absl::InternalError(absl::StrCat("prepare: cannot list directory ", in));
      std::sort(in_dir.begin(), in_dir.end());
      if (in_dir.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("prepare: input directory ", in,
                                                       " has no regular files"));
      }
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(st)) {
      files.push_back(in);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("prepare: input ", in,
                                                     " is neither a regular file nor a directory"));
    }
  }
  return files;
}

bool made_by_prepare(const fs::path& dir) {
  std::ifstream f(dir / kMetaFile);
  if (!f) return false;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return !j.is_discarded() && j.is_object() && j.value("created_by", "") == kCreatedBy;
}

// Files prepare owns inside a data directory.
bool is_prepare_output(const std::string& name) {
  auto shard = [&](const char* prefix) {
    return name.rfind(prefix, 0) == 0 && name.size() > 4 && name.ends_with(".bin");
  };
  return name == kMetaFile || name == kTokenizerFile || name == kTokenBytesFile ||
         shard("train_") || shard("val_");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> make_tokenizer(const PrepareOptions& opts,
                                                          const std::vector<std::string>& files) {
  const std::string& spec = opts.tokenizer;
  if (spec == "bytes") return make_byte_tokenizer();
  if (spec.rfind("tiktoken:", 0) == 0) return load_tiktoken(spec.substr(9));
  if (spec.rfind("bpe:", 0) == 0) {
    int32_t n = 0;
    if (!absl::SimpleAtoi(spec.substr(4), &n)) {
      return absl::InvalidArgumentError(absl::StrCat("--tokenizer ", spec,
                                                     ": expected bpe:N with N an integer, e.g. bpe:4096"));
    }
    BpeTrainOptions to;
    to.vocab_size = n;
    to.verbose = opts.verbose;
    if (n < 257) return train_bpe(ChunkCounter(nullptr), to);  // reports the size error
    VT_ASSIGN_OR_RETURN(auto pretok, PreTokenizer::create(cl100k_pattern()));
    ChunkCounter counter(pretok);
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& f : files) {
      VT_ASSIGN_OR_RETURN(std::string text, read_text(f));
      counter.add_text(text);
    }
    if (opts.verbose) {
      std::printf("prepare: %lld chunks (%zu unique) pre-split in %.2fs; training bpe:%d\n",
                  static_cast<long long>(counter.total_chunks()), counter.counts().size(),
                  seconds_since(t0), n);
      std::fflush(stdout);
    }
    VT_ASSIGN_OR_RETURN(auto tok, train_bpe(counter, to));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --tokenizer '", spec, "'; use bytes, bpe:N (e.g. bpe:4096) or tiktoken:FILE"));
}

// Writes tokens[begin, end) as shards prefix_000000.bin... of at most shard_tokens tokens.
absl::StatusOr<std::vector<std::string>> write_split(const fs::path& dir, const std::string& prefix,
                                                     const int32_t* tokens, int64_t count,
                                                     int64_t shard_tokens, int64_t vocab) {
  std::vector<std::string> names;
  for (int64_t start = 0; start < count; start += shard_tokens) {
    const int64_t n = std::min(shard_tokens, count - start);
    std::string name = absl::StrFormat("%s_%06d.bin", prefix, names.size());
    VT_RETURN_IF_ERROR(write_shard((dir / name).string(),
                                   std::span<const int32_t>(tokens + start, n), vocab));
    names.push_back(std::move(name));
  }
  return names;
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

absl::Status run(const PrepareOptions& opts, const fs::path& out, const fs::path& tmp) {
  const auto t0 = std::chrono::steady_clock::now();
  VT_ASSIGN_OR_RETURN(std::vector<std::string> files, list_inputs(opts.inputs));
  int64_t input_bytes = 0;
  for (const auto& f : files) input_bytes += static_cast<int64_t>(fs::file_size(f));
  if (opts.verbose) {
    std::printf("prepare: %zu input file(s), %.2f MB -> %s (tokenizer %s)\n", files.size(),
                input_bytes / 1e6, out.string().c_str(), opts.tokenizer.c_str());
    std::fflush(stdout);
  }
  VT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, make_tokenizer(opts, files));
  const int32_t vocab = tok->vocab_size();
  const int32_t bos = tok->bos_id();
  VT_CHECK(bos >= 0);
  VT_RETURN_IF_ERROR(tok->save((tmp / kTokenizerFile).string()));
  if (opts.verbose) {
    std::printf("prepare: tokenizer %s, vocab %d, bos %d (%.1fs)\n", tok->kind().c_str(), vocab, bos,
                seconds_since(t0));
    std::fflush(stdout);
  }

  // Tokenize every document into a scratch stream of int32.
  const fs::path stream_path = tmp / "tokens.tmp";
  int64_t total = 0;
  {
    std::ofstream s(stream_path, std::ios::binary | std::ios::trunc);
    if (!s) return absl::InternalError(absl::StrCat("cannot create ", stream_path.string()));
    for (size_t i = 0; i < files.size(); ++i) {
      VT_ASSIGN_OR_RETURN(std::string text, read_text(files[i]));
      std::vector<int32_t> ids = tok->encode(text);
      s.write(reinterpret_cast<const char*>(&bos), 4);
      s.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
      total += 1 + static_cast<int64_t>(ids.size());
      if (opts.verbose && (files.size() <= 20 || (i + 1) % 100 == 0 || i + 1 == files.size())) {
        std::printf("prepare: tokenized %zu/%zu %s: %zu bytes -> %zu tokens (%.2f bytes/token)\n",
                    i + 1, files.size(), files[i].c_str(), text.size(), ids.size(),
                    ids.empty() ? 0.0 : static_cast<double>(text.size()) / ids.size());
        std::fflush(stdout);
      }
    }
    if (!s.flush()) return absl::InternalError(absl::StrCat("writing ", stream_path.string(), " failed (disk full?)"));
  }

  int64_t n_val = 0;
  if (opts.val_fraction > 0) {
    n_val = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(opts.val_fraction * total)));
  }
  const int64_t n_train = total - n_val;
  if (n_train < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prepare: the inputs give only %d tokens, too few for a training split of >= 2 tokens%s; "
        "add more text or lower --val-fraction",
        total, n_val > 0 ? absl::StrFormat(" after %d validation tokens", n_val) : ""));
  }

  // Map the stream and cut it into shards.
  std::vector<std::string> train_names, val_names;
  {
    int fd = ::open(stream_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot reopen ", stream_path.string()));
    const size_t len = static_cast<size_t>(total) * 4;
    void* m = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) return absl::InternalError(absl::StrCat("cannot mmap ", stream_path.string()));
    const int32_t* toks = static_cast<const int32_t*>(m);
    auto tr = write_split(tmp, "train", toks, n_train, opts.shard_tokens, vocab);
    auto va = tr.ok() ? write_split(tmp, "val", toks + n_train, n_val, opts.shard_tokens, vocab)
                      : absl::StatusOr<std::vector<std::string>>(tr.status());
    ::munmap(m, len);
    VT_RETURN_IF_ERROR(tr.status());
    VT_RETURN_IF_ERROR(va.status());
    train_names = *tr;
    val_names = *va;
  }
  fs::remove(stream_path);

  const std::vector<int32_t> tb = token_bytes_table(*tok);
  {
    std::ofstream f(tmp / kTokenBytesFile, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(tb.data()), static_cast<std::streamsize>(tb.size() * 4));
    if (!f.flush()) return absl::InternalError("cannot write token_bytes.bin (disk full?)");
  }

  nlohmann::json meta;
  meta["format"] = "vtrain-data";
  meta["version"] = 1;
  meta["created_by"] = kCreatedBy;
  meta["tokenizer"] = {{"spec", opts.tokenizer}, {"kind", tok->kind()}, {"vocab_size", vocab},
                       {"bos_id", bos}, {"file", kTokenizerFile}};
  meta["token_bytes"] = kTokenBytesFile;
  meta["token_width"] = shard_token_width(vocab);
  meta["inputs"] = files;
  meta["documents"] = files.size();
  meta["input_bytes"] = input_bytes;
  meta["val_fraction"] = opts.val_fraction;
  meta["shard_tokens"] = opts.shard_tokens;
  meta["train"] = {{"tokens", n_train}, {"shards", train_names}};
  meta["val"] = {{"tokens", n_val}, {"shards", val_names}};
  fs::remove(tmp / kTmpMarker);
  VT_RETURN_IF_ERROR(write_text(tmp / kMetaFile, meta.dump(2) + "\n"));
  VT_RETURN_IF_ERROR(install(tmp, out));
  if (opts.verbose) {
    std::printf("prepare: wrote %s: train %lld tokens in %zu shard(s), val %lld tokens in %zu "
                "shard(s), vocab %d (%.1fs)\n",
                out.string().c_str(), static_cast<long long>(n_train), train_names.size(),
                static_cast<long long>(n_val), val_names.size(), vocab, seconds_since(t0));
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

std::string prepare_usage() {
  return "usage: vtrain prepare --input FILE|DIR [FILE ...] --out DATADIR "
         "--tokenizer bytes|bpe:N|tiktoken:FILE [--val-fraction F (0.05)] "
         "[--shard-tokens N (100000000)] [--force] [--quiet]";
}

absl::StatusOr<PrepareOptions> parse_prepare_args(const std::vector<std::string>& args) {
  PrepareOptions o;
  bool have_tok = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value; ", prepare_usage()));
      return args[++i];
    };
    if (a == "--input") {
      VT_ASSIGN_OR_RETURN(std::string v, value());
      o.inputs.push_back(v);
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) o.inputs.push_back(args[++i]);
    } else if (a == "--out") {
      VT_ASSIGN_OR_RETURN(o.out_dir, value());
    } else if (a == "--tokenizer") {
      VT_ASSIGN_OR_RETURN(o.tokenizer, value());
      have_tok = true;
    } else if (a == "--val-fraction") {
      VT_ASSIGN_OR_RETURN(std::string v, value());
      if (!absl::SimpleAtod(v, &o.val_fraction) || !(o.val_fraction >= 0 && o.val_fraction < 1)) {
        return absl::InvalidArgumentError(absl::StrCat("--val-fraction ", v, ": expected a number in [0, 1)"));
      }
    } else if (a == "--shard-tokens") {
      VT_ASSIGN_OR_RETURN(std::string v, value());
      if (!absl::SimpleAtoi(v, &o.shard_tokens) || o.shard_tokens < 1 || o.shard_tokens > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("--shard-tokens ", v, ": expected an integer in [1, 2^31)"));
      }
    } else if (a == "--force") {
      o.force = true;
    } else if (a == "--quiet") {
      o.verbose = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("prepare: unknown argument '", a, "'; ", prepare_usage()));
    }
  }
  if (o.inputs.empty()) return absl::InvalidArgumentError(absl::StrCat("prepare: --input is required; ", prepare_usage()));
  if (o.out_dir.empty()) return absl::InvalidArgumentError(absl::StrCat("prepare: --out is required; ", prepare_usage()));
  if (!have_tok) return absl::InvalidArgumentError(absl::StrCat("prepare: --tokenizer is required; ", prepare_usage()));
  return o;
}

absl::Status prepare_data(const PrepareOptions& opts) {
  if (opts.out_dir.empty()) return absl::InvalidArgumentError("prepare: --out is required");
  if (!(opts.val_fraction >= 0 && opts.val_fraction < 1)) {
    return absl::InvalidArgumentError("prepare: --val-fraction must be in [0, 1)");
  }
  if (opts.shard_tokens < 1 || opts.shard_tokens > INT32_MAX) {
    return absl::InvalidArgumentError("prepare: --shard-tokens must be in [1, 2^31)");
  }
  fs::path out = fs::path(opts.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // trailing slash
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
  const fs::path tmp = fs::path(out.string() + ".prepare-tmp");
  if (fs::exists(tmp)) {
    if (!fs::exists(tmp / kTmpMarker)) {
      return absl::AlreadyExistsError(absl::StrCat("prepare: ", tmp.string(),
                                                   " exists and is not a leftover of prepare; move it away"));
    }
    fs::remove_all(tmp, ec);
  }
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("prepare: cannot create ", tmp.string(), ": ", ec.message()));
  VT_RETURN_IF_ERROR(write_text(tmp / kTmpMarker, "scratch directory of vtrain prepare\n"));
  absl::Status st;
  try {
    st = run(opts, out, tmp);
  } catch (const fs::filesystem_error& e) {
    st = absl::InternalError(absl::StrCat("prepare: file system error: ", e.what()));
  }
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

}  // namespace vt::data
