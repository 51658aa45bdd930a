// BpeTokenizer: construction/validation of a rank table and the per-chunk merge loop
// (a min-heap over adjacent pairs with lazy invalidation), plus the chunk cache.
#include "data/bpe.h"

#include <atomic>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "core/check.h"

namespace vt::data {

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(
    std::string kind, std::vector<std::string> tokens, std::vector<std::string> specials,
    std::string_view pattern, std::vector<BpeMerge> merges, std::string source) {
  static std::atomic<uint64_t> next_instance{1};
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->instance_ = next_instance.fetch_add(1);
  t->kind_ = std::move(kind);
  t->source_ = std::move(source);
  t->merges_ = std::move(merges);
  t->tokens_ = std::move(tokens);
  t->specials_ = std::move(specials);
  VT_ASSIGN_OR_RETURN(t->pretok_, PreTokenizer::create(pattern));
  t->ranks_.reserve(t->tokens_.size());
  for (size_t id = 0; id < t->tokens_.size(); ++id) {
    const std::string& b = t->tokens_[id];
    if (b.empty()) continue;
    auto [it, inserted] = t->ranks_.emplace(b, static_cast<int32_t>(id));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s tokenizer: ids %d and %d have the same bytes (base64 %s); token bytes must be unique",
          t->kind_, it->second, id, absl::Base64Escape(b)));
    }
  }
  for (int c = 0; c < 256; ++c) {
    int32_t r = t->rank_of(std::string_view(reinterpret_cast<const char*>(&c), 1));
    if (r < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s tokenizer has no token for the single byte 0x%02x; a byte-level BPE needs all 256 "
          "bytes so that any input can be encoded",
          t->kind_, c));
    }
    t->byte_id_[c] = r;
  }
  // Each pair merges once, into one token, and each token is made by one merge: a repeated pair
  // or result makes the merge order ambiguous, so it is refused naming both merges.
  absl::flat_hash_map<std::pair<int32_t, int32_t>, size_t> pair_at;
  absl::flat_hash_map<int32_t, size_t> result_at;
  for (size_t i = 0; i < t->merges_.size(); ++i) {
    const BpeMerge& m = t->merges_[i];
    auto [p, new_pair] = pair_at.emplace(std::make_pair(m.left, m.right), i);
    auto [r, new_result] = result_at.emplace(m.result, i);
    if (!new_pair || !new_result) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s tokenizer: merge %d (%d, %d) -> %d repeats merge %d's %s", t->kind_, i, m.left,
          m.right, m.result, !new_pair ? p->second : r->second, !new_pair ? "pair" : "result"));
    }
  }
  for (const BpeMerge& m : t->merges_) {
    const int32_t n = t->num_regular();
    if (m.left < 0 || m.left >= n || m.right < 0 || m.right >= n || m.result < 0 || m.result >= n ||
        t->tokens_[m.result] != t->tokens_[m.left] + t->tokens_[m.right]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s tokenizer: merge (%d, %d) -> %d does not match the token bytes", t->kind_, m.left,
          m.right, m.result));
    }
  }
  return t;
}

int32_t BpeTokenizer::rank_of(std::string_view bytes) const {
  auto it = ranks_.find(absl::string_view(bytes.data(), bytes.size()));
  return it == ranks_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  const int n = static_cast<int>(chunk.size());
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(chunk[0])]);
    return;
  }
  if (int32_t r = rank_of(chunk); r >= 0) {
    out.push_back(r);
    return;
  }
  // Parts are byte ranges [i, nxt[i]); a part is identified by its start i.
  std::vector<int> nxt(n), prv(n);
  std::vector<char> alive(n, 1);
  for (int i = 0; i < n; ++i) {
    nxt[i] = i + 1;
    prv[i] = i - 1;
  }
  struct Cand {
    int32_t rank;
    int start;
    int end;  // end of the merged span when pushed; stale if the parts changed since
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int i) {
    if (i < 0 || nxt[i] >= n) return;
    const int end = nxt[nxt[i]];
    int32_t r = rank_of(chunk.substr(i, end - i));
    if (r >= 0) heap.push({r, i, end});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    const int i = c.start;
    if (!alive[i] || nxt[i] >= n || nxt[nxt[i]] != c.end) continue;  // stale
    const int j = nxt[i];
    alive[j] = 0;
    nxt[i] = nxt[j];
    if (nxt[j] < n) prv[nxt[j]] = i;
    push(i);
    push(prv[i]);
  }
  for (int i = 0; i < n; i = nxt[i]) {
    int32_t r = rank_of(chunk.substr(i, nxt[i] - i));
    VT_CHECK(r >= 0);
    out.push_back(r);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  constexpr size_t kMaxCachedChunk = 128;
  constexpr size_t kMaxCacheEntries = 1 << 18;
  // One cache per thread, for the tokenizer that thread used last.
  struct ThreadCache {
    uint64_t owner = 0;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };
  thread_local ThreadCache cache;
  if (cache.owner != instance_) {
    cache.map.clear();
    cache.owner = instance_;
  }
  pretok_->split(text, [&](std::string_view chunk) {
    if (chunk.size() > kMaxCachedChunk) {
      encode_chunk(chunk, out);
      return;
    }
    auto it = cache.map.find(absl::string_view(chunk.data(), chunk.size()));
    if (it != cache.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    const size_t before = out.size();
    encode_chunk(chunk, out);
    if (cache.map.size() >= kMaxCacheEntries) cache.map.clear();
    cache.map.emplace(chunk, std::vector<int32_t>(out.begin() + before, out.end()));
  });
  return out;
}

void BpeTokenizer::to_json(nlohmann::json& j) const {
  j["pattern"] = pretok_->pattern();
  if (!merges_.empty() || kind_ == "bpe") {
    nlohmann::json m = nlohmann::json::array();
    for (const BpeMerge& x : merges_) m.push_back({x.left, x.right, x.result});
    j["merges"] = std::move(m);
  }
  if (!source_.empty()) j["source"] = source_;
}

}  // namespace vt::data
