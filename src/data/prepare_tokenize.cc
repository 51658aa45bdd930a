// The first two steps of `vtrain prepare` (prepare_steps.h): the tokenizer (a bpe:N trained on the
// sample counted by every rank and merged on rank 0) and the encoding of each rank's units into
// scratch files, documents encoded in parallel by the rank's threads in batches.
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "data/bpe_trainer.h"
#include "data/prepare_steps.h"
#include "data/shards.h"
#include "data/tokenizer_files.h"

namespace vt::data {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kBatchBytes = 16 << 20;  // text encoded per parallel batch
constexpr int kMaxWarnings = 20;           // per rank; then only the count

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int threads_of(const PrepareOptions& o) { return o.threads > 0 ? o.threads : omp_get_max_threads(); }

}  // namespace

DocumentReaderOptions PrepareContext::reader_options(int file) const {
  static std::atomic<int> warnings{0};
  DocumentReaderOptions r;
  r.format = files[file].format;
  r.text_field = opts->text_field;
  r.skip_bad = opts->skip_bad_records;
  r.max_document_bytes = opts->max_document_bytes;
  const int rank = group->rank();
  r.warn = [rank](const std::string& msg) {
    const int n = warnings.fetch_add(1);
    if (n < kMaxWarnings) {
      std::fprintf(stderr, "prepare: warning: %s\n", msg.c_str());
    } else if (n == kMaxWarnings) {
      std::fprintf(stderr, "prepare: warning: more bad records on rank %d; meta.json counts them all\n", rank);
    }
  };
  return r;
}

fs::path PrepareContext::unit_path(int unit, const char* ext) const {
  return tmp / "units" / absl::StrFormat("u%07d.%s", unit, ext);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> build_tokenizer(const PrepareContext& ctx) {
  const std::string& spec = ctx.opts->tokenizer;
  if (spec == "bytes") return make_byte_tokenizer();
  if (spec.rfind("tiktoken:", 0) == 0) return load_tiktoken(spec.substr(9));
  if (spec.rfind("from:", 0) == 0) {  // another data directory's tokenizer (or its file)
    auto tok = load_tokenizer(spec.substr(5));
    if (!tok.ok())
      return absl::Status(tok.status().code(),
                          absl::StrCat("--tokenizer ", spec, ": ", tok.status().message()));
    return tok;
  }
  if (spec.rfind("bpe:", 0) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --tokenizer '", spec,
        "'; use bytes, bpe:N (e.g. bpe:4096), tiktoken:FILE or from:DATADIR"));
  int32_t n = 0;
  if (!absl::SimpleAtoi(spec.substr(4), &n))
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer ", spec,
                                                   ": expected bpe:N with N an integer, e.g. bpe:4096"));
  BpeTrainOptions to;
  to.vocab_size = n;
  to.verbose = ctx.verbose();
  if (n < 257) return train_bpe(ChunkCounter(nullptr), to);  // reports the size error
  const auto t0 = std::chrono::steady_clock::now();
  VT_ASSIGN_OR_RETURN(auto pretok, PreTokenizer::create(cl100k_pattern()));
  ChunkCounter counter(pretok);
  // This rank's part of the sample: each unit's leading documents up to its share.
  long double total_weight = 0;
  for (const Unit& u : ctx.units) total_weight += static_cast<long double>(u.weight);
  const int64_t sample = ctx.opts->tokenizer_sample_bytes;
  int64_t sampled = 0;
  absl::Status st;
  for (int u : ctx.mine) {
    const Unit& unit = ctx.units[u];
    int64_t budget = INT64_MAX;
    if (sample > 0 && total_weight > 0)
      budget = static_cast<int64_t>(std::ceil(static_cast<long double>(sample) * unit.weight / total_weight));
    DocumentReaderOptions ro = ctx.reader_options(unit.file);
    ro.warn = nullptr;  // bad records are reported once, when the units are encoded
    auto reader = DocumentReader::open(ctx.files[unit.file].path, unit.begin, unit.end, ro);
    if (!reader.ok()) {
      st = reader.status();
      break;
    }
    std::vector<std::string> batch;
    int64_t taken = 0, batch_bytes = 0;
    std::string doc;
    ChunkCounter unit_counter(pretok);  // merged unless the unit's stream turns out damaged
    while (taken < budget) {
      auto got = (*reader)->next(&doc);
      if (!got.ok()) {
        st = got.status();
        break;
      }
      if (!*got) break;
      taken += static_cast<int64_t>(doc.size());
      batch_bytes += static_cast<int64_t>(doc.size());
      batch.push_back(std::move(doc));
      if (batch_bytes >= kBatchBytes) {
        count_chunks_parallel(unit_counter, batch, threads_of(*ctx.opts));
        batch.clear();
        batch_bytes = 0;
      }
    }
    if (!st.ok()) break;
    if ((*reader)->stream_failed()) continue;
    count_chunks_parallel(unit_counter, batch, threads_of(*ctx.opts));
    counter.merge(unit_counter);
    sampled += taken;
  }
  VT_RETURN_IF_ERROR(ctx.group->agree(st));
  const int64_t sampled_all = ctx.group->all_sum({sampled})[0];
  // Rank 0 merges the counts, trains, and writes tokenizer.json for every rank to load.
  absl::Status train_st;
  if (ctx.group->size() > 1) {
    std::vector<std::string> parts = ctx.group->gather_bytes(counter.serialize());
    if (ctx.rank0()) {
      ChunkCounter merged(pretok);
      for (const std::string& p : parts)
        if (train_st.ok()) train_st = merged.add_serialized(p);
      counter = std::move(merged);
    }
  }
  const fs::path tok_path = ctx.tmp / kTokenizerFile;
  if (ctx.rank0() && train_st.ok()) {
    if (ctx.verbose()) {
      std::printf("prepare: tokenizer sample %.2f MB of text: %lld chunks (%zu unique) pre-split in "
                  "%.2fs; training bpe:%d\n",
                  sampled_all / 1e6, static_cast<long long>(counter.total_chunks()),
                  counter.counts().size(), seconds_since(t0), n);
      std::fflush(stdout);
    }
    auto tok = train_bpe(counter, to);
    train_st = tok.ok() ? (*tok)->save(tok_path.string()) : tok.status();
  }
  VT_RETURN_IF_ERROR(ctx.group->agree(train_st));
  return load_tokenizer(tok_path.string());
}

absl::StatusOr<std::vector<UnitStats>> tokenize_units(const PrepareContext& ctx, const Tokenizer& tok) {
  const auto t0 = std::chrono::steady_clock::now();
  const int width = shard_token_width(tok.vocab_size());
  const int threads = threads_of(*ctx.opts);
  std::vector<int64_t> flat(ctx.units.size() * 5, 0);  // per unit: UnitStats' fields
  absl::Status st;
  auto last_report = std::chrono::steady_clock::now();
  int64_t my_text = 0, my_tokens = 0;
  for (size_t k = 0; k < ctx.mine.size() && st.ok(); ++k) {
    const int u = ctx.mine[k];
    const Unit& unit = ctx.units[u];
    auto reader = DocumentReader::open(ctx.files[unit.file].path, unit.begin, unit.end,
                                       ctx.reader_options(unit.file));
    if (!reader.ok()) {
      st = reader.status();
      break;
    }
    std::ofstream tok_out(ctx.unit_path(u, "tok"), std::ios::binary | std::ios::trunc);
    std::ofstream idx_out(ctx.unit_path(u, "idx"), std::ios::binary | std::ios::trunc);
    if (!tok_out || !idx_out) {
      st = absl::InternalError(absl::StrCat("cannot create scratch files in ", (ctx.tmp / "units").string()));
      break;
    }
    UnitStats us;
    std::vector<std::string> batch;
    std::vector<std::vector<int32_t>> ids;
    std::vector<uint16_t> narrow;
    std::string doc;
    bool more = true;
    while (more) {
      batch.clear();
      int64_t batch_bytes = 0;
      while (batch_bytes < kBatchBytes) {
        auto got = (*reader)->next(&doc);
        if (!got.ok()) {
          st = got.status();
          break;
        }
        if (!*got) {
          more = false;
          break;
        }
        batch_bytes += static_cast<int64_t>(doc.size());
        batch.push_back(std::move(doc));
      }
      if (!st.ok()) break;
      ids.assign(batch.size(), {});
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
      for (int64_t i = 0; i < static_cast<int64_t>(batch.size()); ++i) ids[i] = tok.encode(batch[i]);
      for (size_t i = 0; i < batch.size(); ++i) {
        const std::vector<int32_t>& v = ids[i];
        if (width == 2) {
          narrow.assign(v.begin(), v.end());
          tok_out.write(reinterpret_cast<const char*>(narrow.data()),
                        static_cast<std::streamsize>(narrow.size() * 2));
        } else {
          tok_out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
        }
        us.tokens += static_cast<int64_t>(v.size());
        us.docs += 1;
        us.text_bytes += static_cast<int64_t>(batch[i].size());
        idx_out.write(reinterpret_cast<const char*>(&us.tokens), 8);
      }
    }
    if (!st.ok()) break;
    us.skipped = (*reader)->skipped();
    if ((*reader)->stream_failed()) {  // --on-bad-record skip: the whole file is left out
      tok_out.close();
      idx_out.close();
      tok_out.open(ctx.unit_path(u, "tok"), std::ios::binary | std::ios::trunc);
      idx_out.open(ctx.unit_path(u, "idx"), std::ios::binary | std::ios::trunc);
      us = UnitStats{};
      us.dropped_files = 1;
    }
    if (!tok_out.flush() || !idx_out.flush()) {
      st = absl::InternalError(absl::StrCat("writing scratch files in ", (ctx.tmp / "units").string(),
                                            " failed (is the disk full?)"));
      break;
    }
    flat[5 * u + 0] = us.docs;
    flat[5 * u + 1] = us.tokens;
    flat[5 * u + 2] = us.skipped;
    flat[5 * u + 3] = us.text_bytes;
    flat[5 * u + 4] = us.dropped_files;
    my_text += us.text_bytes;
    my_tokens += us.tokens + us.docs;
    if (ctx.verbose() && (seconds_since(last_report) > 10 || k + 1 == ctx.mine.size() ||
                          ctx.mine.size() <= 20)) {
      last_report = std::chrono::steady_clock::now();
      const double s = seconds_since(t0);
      std::printf("prepare: rank 0 encoded %zu/%zu of its units (%s): %.2f MB of text -> %lld "
                  "tokens, %.2f MB/s\n",
                  k + 1, ctx.mine.size(), ctx.files[unit.file].path.c_str(), my_text / 1e6,
                  static_cast<long long>(my_tokens), my_text / 1e6 / std::max(s, 1e-9));
      std::fflush(stdout);
    }
  }
  VT_RETURN_IF_ERROR(ctx.group->agree(st));
  flat = ctx.group->all_sum(flat);
  std::vector<UnitStats> stats(ctx.units.size());
  for (size_t u = 0; u < stats.size(); ++u)
    stats[u] = {flat[5 * u], flat[5 * u + 1], flat[5 * u + 2], flat[5 * u + 3], flat[5 * u + 4]};
  return stats;
}

}  // namespace vt::data
