// Block shape `vskipinit` (Value-SkipInit, He et al. 2023; docs/model.md "Block shapes"): the
// attention sub-block has no skip and its matrix is alpha*I + beta*A per head (alpha = 1,
// beta = 0 at init, trainable: blocks.i.attn.alpha / .beta); the MLP keeps its skip:
//   x = attn_{alpha I + beta A}(norm(x));  x = x + mlp(norm(x))
// W_V and W_O are ordinary matrices; W_O starts U(-s, s) like W_V (not 0: without a skip a zero
// W_O would cut the signal; docs/model.md records the choice).
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/config.h"
#include "model/param_registrar.h"

namespace vt {
namespace {

class VSkipInit final : public BlockShape {
 public:
  const char* name() const override { return "vskipinit"; }
  const char* help() const override {
    return "Value-SkipInit: attention alpha I + beta A, no skip; the MLP keeps its skip";
  }
  void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const override {
    const std::string p = "blocks." + std::to_string(layer) + ".attn.";
    block_params::register_qk(r, layer, lp, false);
    block_params::register_vo_matrices(r, layer, lp, true);
    block_params::register_mlp(r, layer, lp);
    lp.alpha = r.per_head_gain(p + "alpha", InitRule::constant(1.0), layer);
    lp.beta = r.per_head_gain(p + "beta", InitRule::constant(0.0), layer);
  }
  void forward(const BlockKit& k, Tensor& x, BlockActs& a) const override {
    const Tensor n1 = k.norm(a.x_in, a.norm1);
    ops::copy(x, k.attention(n1, a));
    const Tensor n2 = k.norm(k.clone(x), a.norm2);
    ops::axpy(x, k.mlp(n2, a));
  }
  void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const override {
    k.norm_backward(a.norm2, k.mlp_backward(dx, a), dx);
    const Tensor dn1 = k.attention_backward(dx, a);
    Tensor(dx).zero_();  // no skip: the block input's gradient is the attention path's alone
    k.norm_backward(a.norm1, dn1, dx);
  }
};

}  // namespace

const BlockShape& vskipinit_block_shape() {
  static const VSkipInit s;
  return s;
}

}  // namespace vt
