// What the simplified blocks `sas` and `sas-p` (He & Hofmann 2024; docs/model.md "Block
// shapes") share: their checks of the config, the attention side of their parameters, their
// projections and norms (SimplifiedBlock: everything but the block's own forward and backward).
#pragma once
#include "absl/status/status.h"
#include "model/activations.h"
#include "model/block_shape.h"
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

// The BlockShape of sas and sas-p up to their forward and backward (and sas's extra MLP skip
// gain, which its register_layer adds after this one's).
class SimplifiedBlock : public BlockShape {
 public:
  std::vector<ModelOption> options() const override { return simplified::options(); }
  absl::Status validate(const ModelConfig& cfg) const override {
    return simplified::validate(cfg, name());
  }
  bool default_qk_norm() const override { return false; }
  void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const override {
    register_attention_side(r, layer, lp);
  }
  std::vector<float> initial_value_projection(const ModelConfig& cfg, int layer,
                                              uint64_t) const override {
    return simplified::projection_base(cfg, layer, false);
  }
  std::vector<float> projection_base(const ModelConfig& cfg, int layer, bool out) const override {
    return simplified::projection_base(cfg, layer, out);
  }
  bool opens_with_norm(const ModelConfig& cfg, int layer) const override {
    return keeps_norm(cfg, layer);
  }
};

}  // namespace simplified
}  // namespace vt
