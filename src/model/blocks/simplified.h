// What the simplified blocks `sas` and `sas-p` (He & Hofmann 2024; docs/model.md "Block
// shapes") share: their checks of the config and the attention side of their parameters.
#pragma once
#include "absl/status/status.h"
#include "model/activations.h"
#include "model/model_option.h"

namespace vt {

struct ModelConfig;
class ParamRegistrar;

namespace simplified {

// Identity projections need Hkv*hd = d; --norm none, --reparam-init, --attn-bias are theirs.
absl::Status validate(const ModelConfig& cfg, const char* shape);
// The flags of the simplified shapes: --norm, --reparam-init, --proj-gains, --attn-bias.
std::vector<ModelOption> options();
// W_Q (zero) and W_K; W_V / W_O: the plain identity, except layer 0's W_V, reparameterized
// s*W0 + r*dW (every layer's W_V and W_O with --reparam-init; with --proj-gains on, gains s_V,
// s_O on the identities and layer 0's W_O reparameterized too); the per-head
// shaped-attention gains alpha, beta, gamma (1, 1, 1; 0, 1, 0 with --attn-bias); W_fc and a
// random W_proj;
// the block gain g_attn (1) and g_mlp (0.1).
void register_attention_side(ParamRegistrar& r, int layer, LayerParams& lp);
// Does layer i keep its pre-norm(s)? (--norm none drops them in layers >= 1.)
bool keeps_norm(const ModelConfig& cfg, int layer);
// W0 of a reparameterized projection (global C x C): the identity, or with --reparam-init orth
// an orthogonal matrix drawn from the run seed (cfg.reparam_seed), one per (layer, V/O).
std::vector<float> projection_base(const ModelConfig& cfg, int layer, bool out);

}  // namespace simplified
}  // namespace vt
