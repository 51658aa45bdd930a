// Block shape `sas-p` (simplified parallel block, He & Hofmann 2024; docs/model.md "Block
// shapes"): parallel and skipless, the attention side of `sas` (shaped attention, W_Q = 0,
// identity W_O and W_V but layer 0's reparameterized W_V) next to the MLP, one norm feeding both:
//   x = g_attn * shaped_attn(norm(x)) + g_mlp * mlp(norm(x)),  g_attn = 1, g_mlp = 0.1.
// --norm none drops the norm in layers >= 1.
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/blocks/simplified.h"
#include "model/config.h"

namespace vt {
namespace {

class SasP final : public simplified::SimplifiedBlock {
 public:
  const char* name() const override { return "sas-p"; }
  const char* help() const override {
    return "simplified parallel block: the attention of sas beside the MLP, no skip";
  }
  void forward(const BlockKit& k, Tensor& x, BlockActs& a) const override {
    const LayerParams& lp = k.params();
    a.norm1.on = simplified::keeps_norm(k.config(), k.layer());
    const Tensor n = k.norm(a.x_in, a.norm1);
    a.attn_out = k.attention(n, a);
    a.mlp_out = k.mlp(n, a);
    ops::copy(x, a.attn_out);
    k.scale(x, lp.attn_gain);
    Tensor m = k.clone(a.mlp_out);
    k.scale(m, lp.mlp_gain);
    k.residual_add(x, m);
  }
  void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const override {
    const LayerParams& lp = k.params();
    k.gain_grad(lp.attn_gain, dx, a.attn_out);
    k.gain_grad(lp.mlp_gain, dx, a.mlp_out);
    Tensor dm = k.clone(dx);
    k.scale(dm, lp.mlp_gain);
    Tensor dn = k.mlp_backward(dm, a);
    k.scale(dx, lp.attn_gain);  // dx = d o
    const Tensor da = k.attention_backward(dx, a);
    Tensor(dx).zero_();                        // skipless
    k.norm_backward_sum(a.norm1, dn, da, dx);  // the branches' sum formed inside the norm
  }
};

}  // namespace

const BlockShape& sas_p_block_shape() {
  static const SasP s;
  return s;
}

}  // namespace vt
