// Block shape `vskipinit` (Value-SkipInit, He et al. 2023; docs/model.md "Block shapes"): the
// attention sub-block has no skip and its matrix is alpha*I + beta*A per head (alpha = 1,
// beta = 0 at init, trainable: blocks.i.attn.alpha / .beta); the MLP keeps its skip and a
// trainable gain (blocks.i.mlp_gain, 0.1 at init):
//   x = attn_{alpha I + beta A}(norm(x));  x = x + g_mlp * mlp(norm(x))
// Inits as the official code runs Value-SkipInit (bobby-he/simplified_transformers,
// exp_scripts/baseline_comparison.sh: config/model/skipless.yaml with val_init_type=orth):
// W_Q = 0, W_V and W_O (semi-)orthogonal, g_mlp = 0.1. QK-norm is off by default (W_Q = 0).
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/config.h"
#include "model/init.h"
#include "model/param_registrar.h"

namespace vt {
namespace {

std::string wv_name(int layer) { return "blocks." + std::to_string(layer) + ".attn.wv"; }

class VSkipInit final : public BlockShape {
 public:
  const char* name() const override { return "vskipinit"; }
  const char* help() const override {
    return "Value-SkipInit: attention alpha I + beta A, no skip, W_Q = 0, orthogonal W_V / W_O; "
           "the MLP keeps its skip, gain 0.1";
  }
  bool default_qk_norm() const override { return false; }
  void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const override {
    const ModelConfig& cfg = r.config();
    const std::string b = "blocks." + std::to_string(layer) + ".";
    const std::string p = b + "attn.";
    const int64_t C = cfg.n_embd;
    block_params::register_qk(r, layer, lp, true);
    if (cfg.layer_has_wv(layer)) {
      lp.v.kind = Projection::Kind::kMatrix;
      const int64_t K = cfg.kv_dim();
      lp.v.w = r.matrix_cols(wv_name(layer), C, K, InitRule::make([C, K, layer](uint64_t s) {
                               return orthogonal_init(s, wv_name(layer), C, K);
                             }),
                             layer);
    }
    const int64_t Q = cfg.q_dim();
    lp.o.kind = Projection::Kind::kMatrix;
    lp.o.w = r.matrix_rows(p + "wo", Q, C, InitRule::make([Q, C, name = p + "wo"](uint64_t s) {
                             return orthogonal_init(s, name, Q, C);
                           }),
                           layer);
    block_params::register_mlp(r, layer, lp);
    lp.alpha = r.per_head_gain(p + "alpha", InitRule::constant(1.0), layer);
    lp.beta = r.per_head_gain(p + "beta", InitRule::constant(0.0), layer);
    lp.mlp_gain = r.gain(b + "mlp_gain", 1, InitRule::constant(0.1), layer);
  }
  std::vector<float> initial_value_projection(const ModelConfig& cfg, int layer,
                                              uint64_t seed) const override {
    return initial_wv(cfg, layer, seed);
  }
  bool opens_with_norm(const ModelConfig&, int) const override { return true; }
  void forward(const BlockKit& k, Tensor& x, BlockActs& a) const override {
    const LayerParams& lp = k.params();
    const Tensor n1 = k.norm(a.x_in, a.norm1);
    ops::copy(x, k.attention(n1, a));
    const Tensor n2 = k.norm(k.clone(x), a.norm2);
    a.mlp_out = k.mlp(n2, a);
    Tensor m = k.clone(a.mlp_out);
    k.scale(m, lp.mlp_gain);
    k.residual_add(x, m);
  }
  void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const override {
    const LayerParams& lp = k.params();
    // x_out = x_mid + g_mlp * m
    k.gain_grad(lp.mlp_gain, dx, a.mlp_out);
    Tensor dm = k.clone(dx);
    k.scale(dm, lp.mlp_gain);
    k.norm_backward(a.norm2, k.mlp_backward(dm, a), dx);
    const Tensor dn1 = k.attention_backward(dx, a);
    Tensor(dx).zero_();  // no skip: the block input's gradient is the attention path's alone
    k.norm_backward(a.norm1, dn1, dx);
  }

 private:
  // W_V (C x Hkv*hd): semi-orthogonal (orthonormal columns), from the stream of its name.
  static std::vector<float> initial_wv(const ModelConfig& cfg, int layer, uint64_t seed) {
    return orthogonal_init(seed, wv_name(layer), cfg.n_embd, cfg.kv_dim());
  }
};

}  // namespace

const BlockShape& vskipinit_block_shape() {
  static const VSkipInit s;
  return s;
}

}  // namespace vt
