// model_split: the sizes of a ModelConfig that a parallel layout must divide (heads, KV heads, MLP
// width, padded vocabulary by tp; layers by pp), for parallel/process_grid.h's make_grid_shape,
// which sits below the model and does not know ModelConfig.
#pragma once
#include "model/config.h"
#include "parallel/process_grid.h"

namespace vt {

inline ModelSplit model_split(const ModelConfig& c) {
  ModelSplit s;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.mlp_hidden = c.mlp_hidden();
  s.vocab_padded = c.vocab_padded;
  s.n_layer = c.n_layer;
  return s;
}

}  // namespace vt
