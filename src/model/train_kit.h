// TrainKit: the BlockKit of training (block_kit.h) for one layer of a GPT stage: whole
// sequences of the micro-batch, activations saved in BlockActs for the backward, tensor
// parallelism (heads and MLP columns local; sub-layer outputs and input gradients all-reduced).
#pragma once
#include "core/ops.h"
#include "model/block_kit.h"
#include "model/gpt.h"

namespace vt {

class TrainKit final : public BlockKit {
 public:
  // `bundle`: the forward bundle in forward (sources are read from it, kept values written to
  // it), the gradient bundle in backward (sources are read from `acts`).
  // `carry_out` (forward only; may be null): where residual_add leaves the block's last add for
  // the next block instead of making it (GPT::block_forward).
  TrainKit(const GPT& m, int layer, Bundle* bundle, Activations& acts,
           Tensor* carry_out = nullptr)
      : m_(m), layer_(layer), bundle_(bundle), acts_(acts), carry_out_(carry_out) {}

  int layer() const override { return layer_; }
  const ModelConfig& config() const override { return m_.config(); }
  const LayerParams& params() const override { return m_.layer_params(layer_); }

  Tensor norm(const Tensor& x, NormActs& s) const override;
  Tensor attention(const Tensor& n, BlockActs& a) const override;
  Tensor mlp(const Tensor& n, BlockActs& a) const override;
  void scale(const Tensor& y, int gain) const override;
  Tensor clone(const Tensor& x) const override { return x.clone(); }
  Tensor add_norm(Tensor& x, const Tensor& delta, NormActs& s) const override;
  void residual_add(Tensor& x, const Tensor& delta) const override;
  // The previous block's last add (delta, consumed) with this block's input copy and first norm,
  // one fused op: x = x + delta (in delta's buffer), a.x_in = a copy of it (none when the shape
  // never writes its stream in place: then x itself), a.norm1 = norm(x); norm(a.x_in, a.norm1)
  // then returns it.
  void carry_in(Tensor& x, const Tensor& delta, BlockActs& a) const;
  // Whether the norm carry_in made is still unread.
  bool norm_unread() const { return ready_ != nullptr; }

  void norm_backward(const NormActs& s, const Tensor& dn, const Tensor& dx) const override;
  void norm_backward_sum(const NormActs& s, const Tensor& dn, const Tensor& dn2,
                         const Tensor& dx) const override;
  Tensor attention_backward(const Tensor& dout, BlockActs& a) const override;
  Tensor mlp_backward(const Tensor& dm, BlockActs& a) const override;
  void gain_grad(int gain, const Tensor& dy, const Tensor& y) const override;

 private:
  ValueLayerCtx value_ctx() const;
  ops::AttnExtras extras(BlockActs& a, bool forward) const;
  ValueSources value_sources(const Tensor& n, const BlockActs& a, bool forward) const;
  void attention_core(BlockActs& a, bool forward) const;
  Tensor activation(const Tensor& h) const;  // relu^2 or relu (--mlp-act)
  Tensor act(Shape s) const { return m_.act(std::move(s)); }
  Tensor f32(Shape s) const { return m_.f32(std::move(s)); }
  int64_t rows() const { return static_cast<int64_t>(acts_.B) * m_.cfg_.seq_len; }

  const GPT& m_;
  int layer_;
  Bundle* bundle_;
  Activations& acts_;
  Tensor* carry_out_;
  mutable const NormActs* ready_ = nullptr;  // made by carry_in, not yet returned by norm
};

}  // namespace vt
