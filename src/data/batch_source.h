// BatchSource: what the trainer reads its training batches from, one data directory
// (data/loader.h DataLoader) or a weighted mixture of several (data/mixture.h MixtureLoader).
// Either way the state is GLOBAL (the same on every rank, independent of the data-parallel
// size), so a run resumes on any layout where it stopped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace vt::data {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // This rank's rows of the next `global_rows` x `seq_len` batch (inputs and targets shifted by
  // one, B_local x T int32 each, B_local = global_rows / dp_size), then the state advances by the
  // whole global batch on every rank alike.
  virtual absl::Status next_batch_into(int64_t global_rows, int64_t seq_len, int dp_rank,
                                       int dp_size, int32_t* inputs, int32_t* targets) = 0;
  virtual nlohmann::json state_json() const = 0;
  virtual absl::Status load_state_json(const nlohmann::json& j) = 0;
  // Every shard this source reads (all sources' for a mixture), for the data fingerprint and the
  // token-id check.
  virtual const std::vector<std::string>& shard_paths() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Tokens of one pass over the data (summed over a mixture's sources).
  virtual int64_t tokens_per_epoch() const = 0;
  // A mixture's training tokens so far per source, {name: tokens}; null for one directory.
  virtual nlohmann::json tokens_by_source() const { return nullptr; }
  // Lines for the log about what the last load_state_json changed (a mixture's new weights,
  // sources added or dropped); empty for one directory.
  virtual std::vector<std::string> resume_notes() const { return {}; }
};

}  // namespace vt::data
