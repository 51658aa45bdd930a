// Parameter initialization of MODEL.md: each parameter is generated whole (its global shape)
// from its own random stream keyed by (seed, name), then each rank keeps its slice. So every
// layout starts from the same numbers, and `bov` tables can be aligned with the W_V that `x0v`
// would draw for the same layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/config.h"

namespace vt {

// The global tensor (row-major, info.global_shape) of the parameter `name`.
std::vector<float> init_global_param(const ModelConfig& cfg, const std::string& name,
                                     const Shape& global_shape, uint64_t seed);

// Copies this rank's slice (info.split) of `global` into `local`.
void copy_local_slice(const std::vector<float>& global, const ParamInfo& info, float* local);

}  // namespace vt
