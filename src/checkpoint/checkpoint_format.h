// What a checkpoint file holds, apart from how it is written or read (checkpoint.h, the writer and
// reader; checkpoint_plan.h, who writes what; checkpoint_verify.h, the checks): the format's
// name and version, the training state a checkpoint carries, tensors stored under explicit
// paths (optimizer states), and the datasets a model's checkpoint must have.
#pragma once
#include <set>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

namespace vt {

inline constexpr const char* kCheckpointFormat = "vtrain-checkpoint";
// 1: single-process writer, no checksums (still readable). 2: parallel writer, checksums.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr const char* kVtrainLibraryVersion = "vtrain 0.2.0";

struct CheckpointMeta {
  int64_t step = 0;
  int64_t tokens = 0;
  nlohmann::json loader_state;  // train loader state (global)
  nlohmann::json rng_state;     // optional (null when not given)
  nlohmann::json extra;         // anything else worth keeping (e.g. the train options)
  // Filled when reading (ignored when saving; the writer sets them).
  int format_version = 0;
  std::string library_version;
  nlohmann::json layout;  // {"tp","dp","pp","world"} the checkpoint was written with
};

// A tensor stored under an explicit dataset path (optimizer states: /optim/<param>/<kind>).
// `tensor` is this rank's local shard. With `global_shape` empty the writer infers it: a path
// /optim/<param>/<kind> takes that parameter's global shape and split from the store (so states
// must have the parameter's local shape); any other path is a whole (replicated) tensor.
struct NamedTensor {
  std::string path;
  Tensor tensor;
  Shape global_shape = {};
  ParamSplit split = {};
};

std::string optim_state_path(const std::string& param, const std::string& kind);
// A state of `param` with the parameter's split, e.g. state_tensor(info, "exp_avg", t).
NamedTensor state_tensor(const ParamInfo& param, const std::string& kind, Tensor local);

// The datasets of the whole model of `cfg` ("/model/<name>", global shape) in registration
// order (a registration-only GPT with the default layout).
std::vector<std::pair<std::string, Shape>> model_datasets(const ModelConfig& cfg);
// The optimizer states a training checkpoint of `cfg` holds (what a resume reads): for every
// parameter, /optim/<param>/<kind> with Muon's kinds (matrices) or AdamW's, of its global shape.
// adamw_matrices (--optimizer adamw): AdamW's kinds for the matrices too.
std::vector<std::pair<std::string, Shape>> optimizer_datasets(const ModelConfig& cfg,
                                                              bool adamw_matrices = false);
// Were the block matrices of a checkpoint of `cfg` trained by AdamW (--optimizer adamw)? True
// when the first block matrix has an AdamW state among `present` dataset names.
bool matrices_in_adamw(const ModelConfig& cfg, const std::set<std::string>& present);
// "field: checkpoint X, model Y" for every config field that differs.
std::vector<std::string> config_differences(const ModelConfig& checkpoint, const ModelConfig& model);

}  // namespace vt
