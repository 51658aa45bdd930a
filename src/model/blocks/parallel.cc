// Block shape `parallel` (GPT-J; docs/model.md "Block shapes"): one norm feeds both branches,
//   x = x + attn(norm(x)) + mlp(norm(x))
// with the prenorm parameters (plain W_V / W_O, W_O starting at 0) and no gains.
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/config.h"

namespace vt {
namespace {

class Parallel final : public BlockShape {
 public:
  const char* name() const override { return "parallel"; }
  const char* help() const override {
    return "x = x + attn(norm x) + mlp(norm x), one norm (GPT-J)";
  }
  void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const override {
    block_params::register_qk(r, layer, lp, false);
    block_params::register_vo_matrices(r, layer, lp, false);
    block_params::register_mlp(r, layer, lp);
  }
  bool opens_with_norm(const ModelConfig&, int) const override { return true; }
  void forward(const BlockKit& k, Tensor& x, BlockActs& a) const override {
    const Tensor n = k.norm(a.x_in, a.norm1);
    const Tensor o = k.attention(n, a);
    const Tensor m = k.mlp(n, a);
    ops::axpy(x, o);
    k.residual_add(x, m);
  }
  void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const override {
    // The two branches' gradients of the shared norm are summed inside its backward.
    const Tensor dm = k.mlp_backward(dx, a);
    k.norm_backward_sum(a.norm1, dm, k.attention_backward(dx, a), dx);
  }
};

}  // namespace

const BlockShape& parallel_block_shape() {
  static const Parallel s;
  return s;
}

}  // namespace vt
