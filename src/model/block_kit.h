// BlockKit: the sub-layers a block shape composes (docs/model.md, "Block shapes"). A shape's
// forward is written once against this interface and runs both in training (TrainKit,
// train_kit.cc: whole sequences, activations saved for backward) and in incremental decoding
// (the decoder's kit in decode.cc: one token against the KV cache). Backward exists only in
// training. Each kit is bound to one layer.
#pragma once
#include "core/tensor.h"
#include "model/activations.h"

namespace vt {

struct ModelConfig;

class BlockKit {
 public:
  virtual ~BlockKit() = default;
  virtual int layer() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const LayerParams& params() const = 0;

  // n = norm(x) over rows of C (RMSNorm without weight), saved in s; with s.on false, n is x.
  // x must not change afterwards while s is alive (pass a copy of a stream that will).
  virtual Tensor norm(const Tensor& x, NormActs& s) const = 0;
  // The attention sub-layer on the normalized input n: q/k, the value path, attention (shaped,
  // biased, NeuTRENO as the layer says), output projection; (N, C), summed over TP.
  virtual Tensor attention(const Tensor& n, BlockActs& a) const = 0;
  // The MLP relu(n W_fc)^2 W_proj; (N, C), summed over TP.
  virtual Tensor mlp(const Tensor& n, BlockActs& a) const = 0;
  // y *= g, with g a (1,) gain parameter read on the device.
  virtual void scale(const Tensor& y, int gain) const = 0;
  // A copy of x.
  virtual Tensor clone(const Tensor& x) const = 0;
  // The residual add and the norm that reads the stream next: x + delta, then its norm as
  // norm(clone(x + delta), s) returns it. delta is consumed (a sub-layer's fresh output, read by
  // nothing else). Training makes the sum in delta's buffer and makes x that buffer, which is
  // also the norm's saved input: no copy, the old x untouched, and x must not be written in place
  // afterwards (residual_add and add_norm may follow). One fused op (ops::add_rmsnorm) when
  // s.on, the add and a copy otherwise; decoding adds into x.
  virtual Tensor add_norm(Tensor& x, const Tensor& delta, NormActs& s) const = 0;
  // The block's last residual add, x + delta (delta consumed, as in add_norm): the last op of a
  // forward on x. Training makes the sum in delta's buffer and makes x that buffer (so a saved
  // x is never written), or leaves the add to the next block, whose input copy and first norm
  // then do it in one fused op (ops::add_rmsnorm; GPT::blocks_forward says when); decoding adds
  // into x.
  virtual void residual_add(Tensor& x, const Tensor& delta) const = 0;

  // Backward (training only). norm_backward adds (+=) into dx; attention/mlp backward return
  // d n (N, C) and accumulate their parameters' gradients; gain_grad: d g += sum(dy * y).
  virtual void norm_backward(const NormActs& s, const Tensor& dn, const Tensor& dx) const = 0;
  // norm_backward of dn + dn2 (one norm read by two branches). With s.on the sum is formed
  // inside the norm's backward and dn is left unchanged; without a norm dn takes the sum.
  virtual void norm_backward_sum(const NormActs& s, const Tensor& dn, const Tensor& dn2,
                                 const Tensor& dx) const = 0;
  virtual Tensor attention_backward(const Tensor& dout, BlockActs& a) const = 0;
  virtual Tensor mlp_backward(const Tensor& dm, BlockActs& a) const = 0;
  virtual void gain_grad(int gain, const Tensor& dy, const Tensor& y) const = 0;
};

}  // namespace vt
