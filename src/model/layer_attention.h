// What one layer adds to plain softmax attention (docs/model.md, "Block shapes" and "Value
// paths"): the --attn-bias logit bias, its block shape's shaped-attention gains alpha, beta,
// gamma, and its value mode's output term (NeuTRENO's lam (V1 - v) on target layers). Built here
// once, for training (train_kit.cc passes it to ops::attention) and for decoding (decode.cc
// applies the same mix to the cached window).
#pragma once
#include <vector>

#include "core/arena.h"
#include "core/ops.h"
#include "model/activations.h"

namespace vt {

struct ModelConfig;

// Layer `layer`'s extras: `bias` (T, T) or undefined, with its `rowscale` (T,) (undefined
// without --spa-rescale on) and the centring matrix --spa-centre chooses; the gains read from
// `store` by `lp`; the value mode's lam and, when it is not 0, V1 = values[0] viewed as
// `v_shape` (the shape of the layer's v). `soft` is left to the caller.
ops::AttnExtras layer_attention_extras(const ModelConfig& cfg, const ParamStore& store,
                                       const LayerParams& lp, int layer, const Tensor& bias,
                                       const Tensor& rowscale, const std::vector<Tensor>& values,
                                       const Shape& v_shape);

}  // namespace vt
