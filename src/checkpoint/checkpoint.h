// Checkpoints (HDF5): the model config (JSON attribute), every parameter under /model/<name>
// with its global shape, and training state attributes (step, tokens, loader state). Written to
// `<path>.tmp` and renamed, so a crash never leaves a half-written file under the final name.
// This is the single-process writer; every parameter must be whole on this process.
#pragma once
#include <string>

#include "absl/status/statusor.h"
#include "core/arena.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

namespace vt {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  int64_t step = 0;
  int64_t tokens = 0;
  nlohmann::json loader_state;  // train loader state (global)
  nlohmann::json extra;         // anything else worth keeping (e.g. the train options)
};

// A tensor stored under an explicit dataset path (optimizer states: /optim/<param>/<kind>).
struct NamedTensor {
  std::string path;
  Tensor tensor;
};

absl::Status save_checkpoint(const std::string& path, const ModelConfig& cfg,
                             const ParamStore& store, const CheckpointMeta& meta,
                             const std::vector<NamedTensor>& extra = {});

// Reads the config and meta of a checkpoint without touching parameters.
absl::StatusOr<ModelConfig> read_checkpoint_config(const std::string& path);
absl::StatusOr<CheckpointMeta> read_checkpoint_meta(const std::string& path);

// Fills every parameter of `store` from the checkpoint; names and shapes must match exactly
// (the message lists what differs).
absl::Status load_checkpoint_params(const std::string& path, const ParamStore& store);
// Fills each extra tensor from its dataset path (shapes must match).
absl::Status load_checkpoint_tensors(const std::string& path, const std::vector<NamedTensor>& extra);

}  // namespace vt
