// DataLoader: batches of (inputs, targets) from a data directory split, with a GLOBAL, resumable
// state. The split is one token stream per epoch: its shards in order (or, with shuffling, in a
// per-epoch permutation drawn from (seed, epoch)), concatenated, then the next epoch. Each step
// takes the next B_global*T + 1 tokens of that stream as a global batch: row r holds inputs
// tokens[r*T, r*T+T) and targets tokens[r*T+1, r*T+T+1); DP rank k gets rows
// [k*B_global/dp, (k+1)*B_global/dp). The state then advances by B_global*T tokens on every rank
// alike, so the concatenation of the ranks' rows is the dp=1 batch and a state saved under one
// DP size resumes the same stream under another.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "data/batch_source.h"
#include "data/shards.h"
#include "nlohmann/json.hpp"

namespace vt::data {

// Where the stream stands. `shard` is the position in the current epoch's shard order (equal to
// the file index without shuffling); `offset` is a token offset inside that shard.
struct LoaderState {
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t offset = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  bool operator==(const LoaderState&) const = default;
};

struct LoaderOptions {
  int64_t vocab_size = 0;       // 0: read it from meta.json (required then)
  bool shuffle_shards = false;  // permute the shard order every epoch
  uint64_t seed = 0;            // seed of those permutations
};

struct Batch {
  Tensor inputs;   // (B_local, T) i32
  Tensor targets;  // (B_local, T) i32
};

class DataLoader : public BatchSource {
 public:
  // Opens the `split` ("train" or "val") of `data_dir`: the shards meta.json lists, or without
  // meta.json every *.bin whose name has `split` as an '_'-separated part (llm.c data dirs).
  static absl::StatusOr<DataLoader> open(const std::string& data_dir, const std::string& split,
                                         const LoaderOptions& opts = {});

  // This rank's rows of the next global batch, then advances the global state by B_global*T.
  absl::StatusOr<Batch> next_batch(int64_t global_rows, int64_t seq_len, int dp_rank, int dp_size);
  // The same into caller buffers of B_local*T int32 each.
  absl::Status next_batch_into(int64_t global_rows, int64_t seq_len, int dp_rank, int dp_size,
                               int32_t* inputs, int32_t* targets) override;

  const LoaderState& state() const { return state_; }
  // Resumes from a state (validated against this split's shards).
  absl::Status set_state(const LoaderState& s);
  // The state as JSON, with the split's shape for checking on restore:
  // {"split", "epoch", "shard", "offset", "shuffle", "seed", "num_shards", "tokens_per_epoch"}.
  nlohmann::json state_json() const override;
  absl::Status load_state_json(const nlohmann::json& j) override;

  const std::string& split() const { return split_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  int64_t tokens_per_epoch() const override { return total_tokens_; }
  const std::vector<std::string>& shard_paths() const override { return paths_; }

 private:
  // File index of the shard at position k of an epoch's order.
  int64_t shard_at(int64_t epoch, int64_t k) const;
  // Tokens before the state's position within its epoch.
  int64_t epoch_position(const LoaderState& s) const;
  // The state pointing at token `pos` (any non-negative value) counted from the start of `epoch`.
  LoaderState locate(int64_t epoch, int64_t pos) const;
  absl::Status read(LoaderState pos, int64_t count, int32_t* out) const;

  std::string dir_, split_;
  std::vector<std::string> paths_;
  std::vector<ShardReader> shards_;
  int64_t vocab_size_ = 0;
  int64_t total_tokens_ = 0;
  LoaderState state_;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

}  // namespace vt::data
