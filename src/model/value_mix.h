// The forward value mixing of MODEL.md section 2 on rows of a layer's value tensor: given the
// sources a target layer reads (V1, its own context value, table rows, earlier values, the
// gate input), writes v. Shared by training (block.cc) and incremental decoding (decode.cc) so
// the equations live in one place.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "model/config.h"
#include "model/gpt.h"

namespace vt {

// Every tensor is on the model's device in its activation dtype (undefined when not read).
struct ValueSources {
  Tensor v1;                   // (N, K) layer 0's context value
  Tensor ctx;                  // (N, K) this layer's context value (n W_V or x0 W_V)
  Tensor emb;                  // (N, K) table rows E[id] for this rank's heads
  Tensor gate_in;              // (N, C) normalized input rows; the first gate channels are read
  std::vector<Tensor> values;  // dense: values[j] = layer j's context value (N, K)
  double plus_coef = 0.0;      // resformer-plus: s * softmax(logits)[k]
};

// resformer-plus: coef_k = s * softmax(logits)_k with the fixed scale s = L.
std::vector<double> resformer_plus_coefficients(const ModelConfig& cfg, const float* logits,
                                                int64_t n);

// v (N, K) for layer `layer` (which must be a target). K = kv_heads * hd. For value-embed,
// gate_out (N, kv_heads, f32) receives the gate values 3*sigmoid(z). Runs on v's device.
void value_mix_forward(const ModelConfig& cfg, const LayerParams& lp, const ParamStore& store,
                       int layer, const ValueSources& src, int64_t N, int kv_heads,
                       const Tensor& v, const Tensor& gate_out);

}  // namespace vt
