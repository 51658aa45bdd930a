// Block shape `sas` (simplified attention sub-block, He & Hofmann 2024; docs/model.md "Block
// shapes"): the attention sub-block has no skip and uses shaped attention
// alpha*I + beta*A - gamma*C per head with W_Q = 0 (so A = C and the block starts as the
// identity) and, as the official code, plain identity W_O and W_V except layer 0's
// reparameterized W_V (simplified.h: --proj-gains, --reparam-init); the MLP keeps a gained skip:
//   x = g_attn * shaped_attn(norm(x));  x = s_mlp * x + g_mlp * mlp(norm(x))
// g_attn = 1, s_mlp = 1 (blocks.i.mlp_skip), g_mlp = 0.1. --norm none drops both pre-norms in
// layers >= 1.
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/blocks/simplified.h"
#include "model/config.h"
#include "model/param_registrar.h"

namespace vt {
namespace {

class Sas final : public simplified::SimplifiedBlock {
 public:
  const char* name() const override { return "sas"; }
  const char* help() const override {
    return "simplified attention block: shaped attention, W_Q = 0, identity W_V / W_O (layer "
           "0's W_V reparameterized)";
  }
  void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const override {
    SimplifiedBlock::register_layer(r, layer, lp);
    lp.mlp_skip = r.gain("blocks." + std::to_string(layer) + ".mlp_skip", 1,
                           InitRule::constant(1.0), layer);
  }
  void forward(const BlockKit& k, Tensor& x, BlockActs& a) const override {
    const LayerParams& lp = k.params();
    const bool norms = simplified::keeps_norm(k.config(), k.layer());
    a.norm1.on = a.norm2.on = norms;
    a.attn_out = k.attention(k.norm(a.x_in, a.norm1), a);
    ops::copy(x, a.attn_out);
    k.scale(x, lp.attn_gain);
    a.mlp_skip_in = k.clone(x);
    a.mlp_out = k.mlp(k.norm(a.mlp_skip_in, a.norm2), a);
    k.scale(x, lp.mlp_skip);
    Tensor m = k.clone(a.mlp_out);
    k.scale(m, lp.mlp_gain);
    k.residual_add(x, m);
  }
  void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const override {
    const LayerParams& lp = k.params();
    // x_out = s_mlp * x_mid + g_mlp * m
    k.gain_grad(lp.mlp_skip, dx, a.mlp_skip_in);
    k.gain_grad(lp.mlp_gain, dx, a.mlp_out);
    Tensor dm = k.clone(dx);
    k.scale(dm, lp.mlp_gain);
    const Tensor dn2 = k.mlp_backward(dm, a);
    k.scale(dx, lp.mlp_skip);
    k.norm_backward(a.norm2, dn2, dx);  // dx = d x_mid
    // x_mid = g_attn * o
    k.gain_grad(lp.attn_gain, dx, a.attn_out);
    k.scale(dx, lp.attn_gain);  // dx = d o
    const Tensor dn1 = k.attention_backward(dx, a);
    Tensor(dx).zero_();  // no skip around the attention sub-block
    k.norm_backward(a.norm1, dn1, dx);
  }
};

}  // namespace

const BlockShape& sas_block_shape() {
  static const Sas s;
  return s;
}

}  // namespace vt
