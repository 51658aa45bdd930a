// Block shape `prenorm` (the default; docs/model.md "Block shapes"):
//   x = x + attn(norm(x));  x = x + mlp(norm(x))
// with plain W_V / W_O matrices (W_O starts at 0) and no gains.
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/block_shape.h"
#include "model/config.h"

namespace vt {
namespace {

class Prenorm final : public BlockShape {
 public:
  const char* name() const override { return "prenorm"; }
  const char* help() const override {
    return "x = x + attn(norm x); x = x + mlp(norm x) (the default)";
  }
  void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const override {
    block_params::register_qk(r, layer, lp, false);
    block_params::register_vo_matrices(r, layer, lp, false);
    block_params::register_mlp(r, layer, lp);
  }
  bool opens_with_norm(const ModelConfig&, int) const override { return true; }
  bool writes_stream_in_place(const ModelConfig&, int) const override { return false; }
  void forward(const BlockKit& k, Tensor& x, BlockActs& a) const override {
    const Tensor n1 = k.norm(a.x_in, a.norm1);
    // The attention residual add and the MLP's norm in one fused op (ops::add_rmsnorm).
    const Tensor n2 = k.add_norm(x, k.attention(n1, a), a.norm2);
    k.residual_add(x, k.mlp(n2, a));
  }
  void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const override {
    k.norm_backward(a.norm2, k.mlp_backward(dx, a), dx);
    k.norm_backward(a.norm1, k.attention_backward(dx, a), dx);
  }
};

}  // namespace

const BlockShape& prenorm_block_shape() {
  static const Prenorm s;
  return s;
}

}  // namespace vt
