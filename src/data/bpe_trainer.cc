// BPE training: words (unique chunks as symbol sequences with counts), pair counts, an index
// pair -> words that may contain it, and a lazy max-heap keyed (count, -left, -right). Each merge
// rewrites only the words that contain the pair and applies count deltas to neighbouring pairs.
#include "data/bpe_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <omp.h>

#include <cstring>
#include <queue>

#include "absl/strings/str_format.h"
#include "core/check.h"

namespace vt::data {
namespace {

using PairKey = uint64_t;
PairKey pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t pair_left(PairKey k) { return static_cast<int32_t>(k >> 32); }
int32_t pair_right(PairKey k) { return static_cast<int32_t>(k & 0xffffffffu); }

struct HeapEntry {
  int64_t count;
  PairKey pair;
  // Max-heap on count; among equal counts the lowest (left, right) comes first.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

struct Word {
  std::vector<int32_t> syms;
  int64_t count;
};

}  // namespace

void ChunkCounter::add_text(std::string_view text) {
  pretok_->split(text, [&](std::string_view chunk) {
    auto it = counts_.find(absl::string_view(chunk.data(), chunk.size()));
    if (it == counts_.end()) {
      counts_.emplace(chunk, 1);
    } else {
      ++it->second;
    }
    ++total_;
  });
}

void ChunkCounter::add_chunk(std::string_view chunk, int64_t count) {
  counts_[absl::string_view(chunk.data(), chunk.size())] += count;
  total_ += count;
}

void ChunkCounter::merge(const ChunkCounter& other) {
  for (const auto& [k, v] : other.counts_) counts_[k] += v;
  total_ += other.total_;
}

std::string ChunkCounter::serialize() const {
  std::string out;
  for (const auto& [k, v] : counts_) {
    const uint32_t n = static_cast<uint32_t>(k.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out.append(k);
    out.append(reinterpret_cast<const char*>(&v), 8);
  }
  return out;
}

absl::Status ChunkCounter::add_serialized(std::string_view bytes) {
  size_t p = 0;
  while (p < bytes.size()) {
    uint32_t n = 0;
    int64_t v = 0;
    if (p + 4 > bytes.size()) return absl::DataLossError("chunk counts: truncated");
    std::memcpy(&n, bytes.data() + p, 4);
    if (p + 4 + n + 8 > bytes.size()) return absl::DataLossError("chunk counts: truncated");
    std::memcpy(&v, bytes.data() + p + 4 + n, 8);
    add_chunk(bytes.substr(p + 4, n), v);
    p += 4 + n + 8;
  }
  return absl::OkStatus();
}

void count_chunks_parallel(ChunkCounter& counter, const std::vector<std::string>& docs,
                           int threads) {
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  if (nt <= 1 || docs.size() < 2) {
    for (const std::string& d : docs) counter.add_text(d);
    return;
  }
  std::vector<ChunkCounter> local(nt, ChunkCounter(counter.pretokenizer()));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t i = 0; i < static_cast<int64_t>(docs.size()); ++i)
    local[omp_get_thread_num()].add_text(docs[i]);
  for (const ChunkCounter& c : local) counter.merge(c);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> train_bpe(const ChunkCounter& chunks,
                                                        const BpeTrainOptions& opts) {
  const int32_t kSpecials = 1;  // <|bos|>
  if (opts.vocab_size < 256 + kSpecials) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bpe:%d is too small: a byte-level BPE needs 256 byte tokens plus %d special(s), so N >= %d",
        opts.vocab_size, kSpecials, 256 + kSpecials));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t target_regular = opts.vocab_size - kSpecials;

  // Words in a fixed (sorted) order so every internal step is reproducible.
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  sorted.reserve(chunks.counts().size());
  for (const auto& kv : chunks.counts()) sorted.push_back(&kv);
  std::sort(sorted.begin(), sorted.end(), [](auto* x, auto* y) { return x->first < y->first; });
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto* kv : sorted) {
    if (kv->first.size() < 2) continue;  // single bytes never take part in a pair
    Word w;
    w.count = kv->second;
    w.syms.reserve(kv->first.size());
    for (unsigned char c : kv->first) w.syms.push_back(c);
    words.push_back(std::move(w));
  }

  std::vector<std::string> tokens(256);
  absl::flat_hash_map<std::string, int32_t> token_id;
  for (int c = 0; c < 256; ++c) {
    tokens[c] = std::string(1, static_cast<char>(c));
    token_id[tokens[c]] = c;
  }

  absl::flat_hash_map<PairKey, int64_t> pair_count;
  absl::flat_hash_map<PairKey, std::vector<int32_t>> where;  // may hold stale/duplicate entries
  for (int32_t wi = 0; wi < static_cast<int32_t>(words.size()); ++wi) {
    const Word& w = words[wi];
    for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
      const PairKey k = pair_key(w.syms[i], w.syms[i + 1]);
      pair_count[k] += w.count;
      auto& v = where[k];
      if (v.empty() || v.back() != wi) v.push_back(wi);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  std::vector<BpeMerge> merges;
  std::vector<int32_t> visited(words.size(), -1);
  absl::flat_hash_map<PairKey, int64_t> delta;
  int32_t step = 0;
  int64_t last_count = 0;
  while (static_cast<int32_t>(tokens.size()) < target_regular && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    auto pc = pair_count.find(top.pair);
    const int64_t current = pc == pair_count.end() ? 0 : pc->second;
    if (current != top.count) {
      // Counts of existing pairs only fall between pushes, so a stale entry is an overestimate.
      if (current > 0 && current < top.count) heap.push({current, top.pair});
      continue;
    }
    if (current < opts.min_pair_count) break;
    last_count = current;
    const int32_t a = pair_left(top.pair), b = pair_right(top.pair);
    std::string merged = tokens[a] + tokens[b];
    int32_t nid;
    if (auto it = token_id.find(merged); it != token_id.end()) {
      nid = it->second;  // these bytes are already a token: reuse its id
    } else {
      nid = static_cast<int32_t>(tokens.size());
      token_id.emplace(merged, nid);
      tokens.push_back(std::move(merged));
    }
    merges.push_back({a, b, nid});

    delta.clear();
    std::vector<int32_t> cand = std::move(where[top.pair]);
    where.erase(top.pair);
    for (int32_t wi : cand) {
      if (visited[wi] == step) continue;
      visited[wi] = step;
      Word& w = words[wi];
      std::vector<int32_t>& s = w.syms;
      const int64_t c = w.count;
      size_t out = 0;
      bool changed = false;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          // Left neighbour is the last symbol already written (it may be a fresh merge).
          if (out > 0) {
            delta[pair_key(s[out - 1], a)] -= c;
            delta[pair_key(s[out - 1], nid)] += c;
          }
          if (i + 2 < s.size()) {
            delta[pair_key(b, s[i + 2])] -= c;
            delta[pair_key(nid, s[i + 2])] += c;
          }
          s[out++] = nid;
          i += 2;
          changed = true;
        } else {
          s[out++] = s[i++];
        }
      }
      s.resize(out);
      if (!changed) continue;
      // Index this word under the pairs that now contain the new token.
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] == nid || s[i + 1] == nid) {
          auto& v = where[pair_key(s[i], s[i + 1])];
          if (v.empty() || v.back() != wi) v.push_back(wi);
        }
      }
    }
    pair_count.erase(top.pair);
    for (const auto& [k, d] : delta) {
      if (k == top.pair || d == 0) continue;
      int64_t& v = pair_count[k];
      v += d;
      VT_CHECK_MSG(v >= 0, "negative pair count in BPE training");
      if (v == 0) {
        pair_count.erase(k);
      } else if (d > 0) {
        heap.push({v, k});
      }
    }
    ++step;
    if (opts.verbose && (step % 500 == 0)) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  bpe: %d merges, vocab %d/%d, last pair count %lld, %.1fs\n", step,
                  static_cast<int>(tokens.size()) + kSpecials, opts.vocab_size,
                  static_cast<long long>(last_count), secs);
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opts.verbose) {
    std::printf("  bpe: trained %zu merges in %.2fs on %zu unique chunks; vocab %d\n", merges.size(),
                secs, chunks.counts().size(), static_cast<int>(tokens.size()) + kSpecials);
    if (static_cast<int32_t>(tokens.size()) < target_regular) {
      std::printf("  bpe: the corpus ran out of pairs seen >= %lld times; vocab is %d, not %d\n",
                  static_cast<long long>(opts.min_pair_count),
                  static_cast<int>(tokens.size()) + kSpecials, opts.vocab_size);
    }
    std::fflush(stdout);
  }
  return BpeTokenizer::create("bpe", std::move(tokens), {kBosToken},
                              chunks.pretokenizer()->pattern(), std::move(merges));
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> train_bpe_on_text(std::string_view text,
                                                                const BpeTrainOptions& opts) {
  VT_ASSIGN_OR_RETURN(auto pretok, PreTokenizer::create(cl100k_pattern()));
  ChunkCounter counter(pretok);
  counter.add_text(text);
  return train_bpe(counter, opts);
}

}  // namespace vt::data
