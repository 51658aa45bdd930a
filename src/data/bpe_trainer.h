// Training a byte-level BPE (`bpe:N`): count unique pre-split chunks, then merge the most frequent
// adjacent pair, repeatedly, with incremental pair-count updates (pair -> chunks index plus a lazy
// max-heap). Deterministic: ties go to the lowest (left id, right id). A merge whose bytes already
// exist as a token reuses that id (token bytes stay unique, as the rank encoder needs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "data/bpe.h"
#include "data/pretokenize.h"

namespace vt::data {

// Unique chunks of a corpus with their counts. Feed text piece by piece (e.g. one document each).
class ChunkCounter {
 public:
  explicit ChunkCounter(std::shared_ptr<const PreTokenizer> pretok) : pretok_(std::move(pretok)) {}
  void add_text(std::string_view text);
  // Adds `count` occurrences of one chunk (merging counters, e.g. across threads or ranks).
  void add_chunk(std::string_view chunk, int64_t count);
  void merge(const ChunkCounter& other);
  // A byte string of every (chunk, count), and its inverse (adds to this counter).
  std::string serialize() const;
  absl::Status add_serialized(std::string_view bytes);
  const absl::flat_hash_map<std::string, int64_t>& counts() const { return counts_; }
  int64_t total_chunks() const { return total_; }
  const std::shared_ptr<const PreTokenizer>& pretokenizer() const { return pretok_; }

 private:
  std::shared_ptr<const PreTokenizer> pretok_;
  absl::flat_hash_map<std::string, int64_t> counts_;
  int64_t total_ = 0;
};

struct BpeTrainOptions {
  int32_t vocab_size = 4096;   // total ids: 256 bytes + merges + specials (<|bos|>)
  int64_t min_pair_count = 1;  // stop early when the best pair is rarer than this
  bool verbose = false;        // progress lines on stdout
};

// Trains on the counted chunks. The vocabulary is exactly vocab_size unless the corpus runs out of
// pairs first (every chunk already a single token); then it is smaller, which verbose mode says.
// Callers read the size from the result.
absl::StatusOr<std::unique_ptr<BpeTokenizer>> train_bpe(const ChunkCounter& chunks,
                                                        const BpeTrainOptions& opts);

// Counts the chunks of many documents on `threads` threads (0: OpenMP's default).
void count_chunks_parallel(ChunkCounter& counter, const std::vector<std::string>& docs,
                           int threads = 0);

// Convenience: cl100k pre-split of `text`, then train_bpe.
absl::StatusOr<std::unique_ptr<BpeTokenizer>> train_bpe_on_text(std::string_view text,
                                                                const BpeTrainOptions& opts);

}  // namespace vt::data
