// TrainKit (see train_kit.h): the sub-layers of a block for training, forward and backward.
#include "model/train_kit.h"

#include <cmath>

#include "core/ops.h"
#include "model/block_shape.h"
#include "model/layer_attention.h"
#include "model/linear.h"
#include "model/projection.h"
#include "parallel/tensor_parallel.h"

namespace vt {

// GPT's per-block steps of training (declared in gpt.h) run a block shape through this kit.
void GPT::block_forward(int i, Bundle& bundle, Activations& acts, BlockActs& a,
                        const Tensor& carry_in, Tensor* carry_out) const {
  TrainKit kit(*this, i, &bundle, acts, carry_out);
  if (carry_in.defined()) {
    VT_CHECK(shape_->opens_with_norm(cfg_, i));
    kit.carry_in(bundle.x, carry_in, a);
  } else {
    a.x_in = bundle.x.clone();
  }
  shape_->forward(kit, bundle.x, a);
  VT_CHECK_MSG(!kit.norm_unread(), "block " << i << "'s shape did not read its input norm");
}

void GPT::block_backward(int i, Bundle& grad, Activations& acts, BlockActs& a) const {
  TrainKit kit(*this, i, &grad, acts);
  shape_->backward(kit, grad.x, a);
}

Tensor TrainKit::norm(const Tensor& x, NormActs& s) const {
  if (&s == ready_) {  // made by carry_in, from this very input
    VT_CHECK(s.on && x.raw() == s.x.raw());
    ready_ = nullptr;
    return s.n;
  }
  if (!s.on) {
    s.n = x;
    return x;
  }
  const int64_t N = rows(), C = m_.cfg_.n_embd;
  s.x = x;
  s.n = act({N, C});
  s.rstd = f32({N});
  ops::rmsnorm(x, s.n, s.rstd, 1.0f, m_.cfg_.norm_eps);
  return s.n;
}

// The stream is never written in place here: each add writes delta's buffer (x + delta equals
// delta + x bit for bit) and the stream becomes it, so a buffer saved as a norm's input stays as
// it was (no copy of it is needed), and the add reads and writes what an in-place add would.
Tensor TrainKit::add_norm(Tensor& x, const Tensor& delta, NormActs& s) const {
  VT_CHECK(delta.raw() != x.raw() && delta.numel() == x.numel());
  if (!s.on) {  // no norm to fuse with: the add, and the copy the stream's reader keeps
    ops::axpy(delta, x);
    x = delta.reshaped(x.shape());
    return norm(x.clone(), s);
  }
  const int64_t N = rows(), C = m_.cfg_.n_embd;
  s.n = act({N, C});
  s.rstd = f32({N});
  ops::add_rmsnorm(delta, x, Tensor(), s.n, s.rstd, 1.0f, m_.cfg_.norm_eps);
  x = delta.reshaped(x.shape());
  s.x = x;
  return s.n;
}

void TrainKit::residual_add(Tensor& x, const Tensor& delta) const {
  if (carry_out_ == nullptr) {
    VT_CHECK(delta.raw() != x.raw() && delta.numel() == x.numel());
    ops::axpy(delta, x);
    x = delta.reshaped(x.shape());
    return;
  }
  VT_CHECK(!carry_out_->defined());
  *carry_out_ = delta;
}

void TrainKit::carry_in(Tensor& x, const Tensor& delta, BlockActs& a) const {
  VT_CHECK(delta.raw() != x.raw() && delta.numel() == x.numel());
  NormActs& s = a.norm1;
  s.on = true;
  const int64_t N = rows(), C = m_.cfg_.n_embd;
  s.n = act({N, C});
  s.rstd = f32({N});
  // A shape that writes its stream in place needs the block input kept apart from the stream.
  const bool keep = m_.shape_->writes_stream_in_place(m_.cfg_, layer_);
  const Tensor kept = keep ? act(x.shape()) : Tensor();
  ops::add_rmsnorm(delta, x, kept, s.n, s.rstd, 1.0f, m_.cfg_.norm_eps);
  x = delta.reshaped(x.shape());
  s.x = keep ? kept : x;
  a.x_in = s.x;  // the norm's saved input is the block input: one buffer serves both
  ready_ = &s;
}

void TrainKit::norm_backward(const NormActs& s, const Tensor& dn, const Tensor& dx) const {
  if (!s.on) {
    ops::axpy(dx, dn);
    return;
  }
  ops::rmsnorm_backward(s.x, s.rstd, dn, dx, 1.0f, true);
}

void TrainKit::norm_backward_sum(const NormActs& s, const Tensor& dn, const Tensor& dn2,
                                 const Tensor& dx) const {
  if (!s.on) {
    ops::axpy(dn, dn2);
    ops::axpy(dx, dn);
    return;
  }
  ops::rmsnorm_backward(s.x, s.rstd, dn, dx, 1.0f, true, dn2);
}

void TrainKit::scale(const Tensor& y, int gain) const {
  ops::scale_copy_coef(y, y, m_.P(gain));
}

void TrainKit::gain_grad(int gain, const Tensor& dy, const Tensor& y) const {
  // Gains multiply replicated (TP-summed) streams: every TP rank computes the same sum.
  Tensor s = f32({1});
  ops::dot_into(dy, y, s);
  ops::axpy(m_.G(gain), s, 1.0f);
}

ValueLayerCtx TrainKit::value_ctx() const {
  return m_.value_ctx(layer_, rows(), acts_.input_ids, &acts_.value_coef, &acts_.value_dcoef,
                      acts_.table_ids);
}

// Sources of a target layer's value: in forward from the bundle, in backward from the saved
// forward state (acts.values).
ValueSources TrainKit::value_sources(const Tensor& n, const BlockActs& a, bool forward) const {
  const int64_t K = static_cast<int64_t>(m_.kv_heads_) * m_.cfg_.head_dim;
  return gather_value_sources(m_.cfg_.value(), layer_, K, n, a.ctx_v,
                              forward ? bundle_->values : acts_.values);
}

// The additions to plain softmax attention this layer makes (layer_attention.h), with the
// buffer for softmax attention's own output when a mix follows it.
ops::AttnExtras TrainKit::extras(BlockActs& a, bool forward) const {
  ops::AttnExtras ex =
      layer_attention_extras(m_.cfg_, *m_.store_, params(), layer_, m_.attention_bias(layer_),
                             m_.attention_rowscale(layer_),
                             forward ? bundle_->values : acts_.values, a.v.shape());
  if (ex.mix.active()) {
    if (!a.y_soft.defined()) a.y_soft = act(a.y.shape());  // a forward, or its rerun
    ex.soft = a.y_soft;
  }
  return ex;
}

Tensor TrainKit::attention(const Tensor& n_block, BlockActs& a) const {
  const ModelConfig& cfg = m_.cfg_;
  const LayerParams& lp = params();
  const int B = acts_.B, T = cfg.seq_len, hd = cfg.head_dim;
  const int H = m_.heads_, Hkv = m_.kv_heads_;
  const int64_t N = rows(), C = cfg.n_embd, qd = int64_t{H} * hd, kvd = int64_t{Hkv} * hd;
  // A mode mixing x0 into the attention input (resformer-hidden): q, k, v read the mix.
  const float hx = cfg.is_target(layer_) ? cfg.value().attention_input_x0_coef() : 0.0f;
  Tensor n = n_block;
  if (hx != 0.0f) {
    n = act({N, C});
    ops::scale_copy(n, n_block.reshaped({N, C}), 1.0f - hx);
    ops::axpy(n, bundle_->x0.reshaped({N, C}), hx);
  }
  a.attn_in = n;
  Tensor q = act({B, T, H, hd});
  Tensor k = act({B, T, Hkv, hd});
  linear::forward(m_, n, m_.W(lp.wq), q);
  linear::forward(m_, n, m_.W(lp.wk), k);

  // Value path.
  const ValuePath& vp = cfg.value();
  const bool target = cfg.is_target(layer_);
  if (lp.v.defined()) {
    a.ctx_v = act({B, T, Hkv, hd});
    Tensor src = (target && vp.context_from_x0()) ? bundle_->x0 : n;
    if (target && cfg.value_renorms_x0()) {
      // x0v under the smear gate reads the smeared x0 normalized again (gpt_base.py's x0n).
      a.x0n = act({N, C});
      a.x0n_rstd = f32({N});
      ops::rmsnorm(bundle_->x0.reshaped({N, C}), a.x0n, a.x0n_rstd, 1.0f, cfg.norm_eps);
      src = a.x0n;
    }
    projection::forward_in(m_, lp.v, src, a.ctx_v.reshaped({N, kvd}));
    if (m_.keeps_value(layer_)) bundle_->values[layer_] = a.ctx_v;
  }
  if (!target) {
    a.v = a.ctx_v;  // the context value is the attention's value: the same tensor, no copy
  } else {
    a.v = act({B, T, Hkv, hd});
    vp.forward(value_ctx(), value_sources(n, a, true), a.value, a.v.reshaped({N, kvd}));
  }

  // The attention core (RoPE + QK-norm, attention) reads q and k as kept: before RoPE under
  // QK-norm (one fused op rotates and normalizes them), rotated here in place without it.
  if (!cfg.use_qk_norm()) {
    ops::rope(q, q, cfg.rope_base);
    ops::rope(k, k, cfg.rope_base);
  }
  a.q = q;
  a.k = k;
  attention_core(a, true);
  Tensor o = act({N, C});
  projection::forward_out(m_, lp.o, a.y.reshaped({N, qd}), o);
  tp::reduce_outputs(m_.par_.tp_comm(), o);
  return o;
}

// RoPE + QK-norm (ops::rope_rmsnorm, one pass per tensor) and attention from the saved q, k
// (before RoPE; after it without QK-norm) and v: in forward, and again in backward when
// --recompute attn dropped their outputs (`forward`: where the extras read V1).
void TrainKit::attention_core(BlockActs& a, bool forward) const {
  const ModelConfig& cfg = m_.cfg_;
  const int B = acts_.B, T = cfg.seq_len, hd = cfg.head_dim, H = m_.heads_, Hkv = m_.kv_heads_;
  const int64_t N = rows();
  if (cfg.use_qk_norm()) {
    a.qn = act(a.q.shape());
    a.kn = act(a.k.shape());
    a.rstd_q = f32({N * H});
    a.rstd_k = f32({N * Hkv});
    ops::rope_rmsnorm(a.q, a.qn, a.rstd_q, cfg.rope_base, cfg.qk_norm_scale, cfg.norm_eps);
    ops::rope_rmsnorm(a.k, a.kn, a.rstd_k, cfg.rope_base, cfg.qk_norm_scale, cfg.norm_eps);
  } else {
    a.qn = a.q;
    a.kn = a.k;
  }
  a.y = act(a.q.shape());
  a.lse = f32({B, H, T});
  const ops::AttnExtras ex = extras(a, forward);
  ops::attention(a.qn, a.kn, a.v, a.y, a.lse, cfg.layer_window(layer_),
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), ex);
}

Tensor TrainKit::attention_backward(const Tensor& dout, BlockActs& a) const {
  const ModelConfig& cfg = m_.cfg_;
  const LayerParams& lp = params();
  const int hd = cfg.head_dim, H = m_.heads_, Hkv = m_.kv_heads_;
  const int64_t N = rows(), C = cfg.n_embd, qd = int64_t{H} * hd, kvd = int64_t{Hkv} * hd;
  Communicator* tp_comm = m_.par_.tp_comm();

  if (!a.y.defined()) attention_core(a, false);  // --recompute attn dropped it

  // Output projection and attention.
  Tensor dy = act(a.y.shape());
  projection::backward_out(m_, lp.o, a.y.reshaped({N, qd}), dout, dy.reshaped({N, qd}));
  Tensor dqn = act(a.qn.shape()), dkn = act(a.kn.shape());
  Tensor dv = act(a.v.shape());
  const ops::AttnExtras ex = extras(a, false);
  AttnMixGrads mg;
  const LayerParams& lps = params();
  if (lps.alpha >= 0) mg.dalpha = m_.G(lps.alpha);
  if (lps.beta >= 0) mg.dbeta = m_.G(lps.beta);
  if (lps.gamma >= 0) mg.dgamma = m_.G(lps.gamma);
  if (ex.mix.lam != 0.0f && !cfg.detach_v1) mg.dv1 = act(a.v.shape());
  // Under QK-norm the attention's backward goes on through the QK-norm and RoPE (on the GPU in
  // the epilogue of its dQ and dK kernels): dq, dk of the pre-RoPE q, k.
  ops::AttnQkNormGrad qk;
  if (cfg.use_qk_norm()) {
    qk.q = a.q;
    qk.rstd_q = a.rstd_q;
    qk.k = a.k;
    qk.rstd_k = a.rstd_k;
    qk.base = cfg.rope_base;
    qk.scale = cfg.qk_norm_scale;
  }
  ops::attention_backward(a.qn, a.kn, a.v, a.y, a.lse, dy, dqn, dkn, dv, cfg.layer_window(layer_),
                          static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), ex, mg,
                          qk);
  if (mg.dv1.defined()) value_ops::accumulate(bundle_->values[0], mg.dv1, 1.0f);
  // Without QK-norm, back through RoPE, in place: dq, dk.
  if (!cfg.use_qk_norm()) {
    ops::rope_backward(dqn, dqn, cfg.rope_base);
    ops::rope_backward(dkn, dkn, cfg.rope_base);
  }
  const Tensor dq = dqn, dk = dkn;

  // Value path backward: dv -> d ctx_v, d earlier values, the mode's parameters.
  Tensor dn = act({N, C});
  Tensor dctx;
  const ValuePath& vp = cfg.value();
  const bool target = cfg.is_target(layer_);
  if (!target) {
    dctx = dv;  // v is the context value (attention()): its gradient, no copy
  } else {
    if (lp.v.defined()) dctx = act(a.v.shape());
    ValueGrads g;
    g.dctx = dctx.defined() ? dctx.reshaped({N, kvd}) : Tensor();
    g.dgate_in = dn;
    g.dvalues = &bundle_->values;
    g.v1_grad = !cfg.detach_v1;
    vp.backward(value_ctx(), value_sources(a.attn_in, a, false), a.value, dv.reshaped({N, kvd}),
                g);
  }
  // Gradient that later layers sent back to this layer's context value (V1, dense values).
  std::vector<Tensor>& dvalues = bundle_->values;
  if (lp.v.defined() && dvalues.size() > static_cast<size_t>(layer_) &&
      dvalues[layer_].defined()) {
    ops::axpy(dctx, dvalues[layer_]);
    dvalues[layer_] = Tensor();
  }

  // Projections into q, k, v.
  const Tensor& n = a.attn_in;
  linear::backward_dw(m_, n, dq.reshaped({N, qd}), lp.wq);
  linear::backward_dx(m_, dq.reshaped({N, qd}), m_.W(lp.wq), dn, true);
  linear::backward_dw(m_, n, dk.reshaped({N, kvd}), lp.wk);
  linear::backward_dx(m_, dk.reshaped({N, kvd}), m_.W(lp.wk), dn, true);
  if (lp.v.defined()) {
    const Tensor dctx2 = dctx.reshaped({N, kvd});
    if (target && vp.context_from_x0()) {
      Tensor dx0 = act({N, C});
      const bool renorm = cfg.value_renorms_x0();
      projection::backward_in(m_, lp.v, renorm ? a.x0n : acts_.x0.reshaped({N, C}), dctx2, dx0,
                              false);
      tp::reduce_input_grads(tp_comm, dx0);
      if (renorm) {
        // Through norm(x0): d x0 += J^T d x0n (the norm's input is x0, its rstd saved).
        Tensor dx0_in = act({N, C});
        ops::rmsnorm_backward(acts_.x0.reshaped({N, C}), a.x0n_rstd, dx0, dx0_in, 1.0f, false);
        dx0 = dx0_in;
      }
      ops::axpy(bundle_->x0, dx0);
    } else {
      projection::backward_in(m_, lp.v, n, dctx2, dn, true);
    }
  }
  tp::reduce_input_grads(tp_comm, dn);
  // The attention input (1 - c) n + c x0 (resformer-hidden): c of d input goes to x0.
  if (const float hx = target ? vp.attention_input_x0_coef() : 0.0f; hx != 0.0f) {
    ops::axpy(bundle_->x0.reshaped({N, C}), dn, hx);
    ops::scale_copy(dn, dn, 1.0f - hx);
  }
  return dn;
}

Tensor TrainKit::activation(const Tensor& h) const {
  Tensor y = act(h.shape());
  if (m_.cfg_.mlp_act == "relu")
    ops::relu(h, y);
  else
    ops::relu2(h, y);
  return y;
}

Tensor TrainKit::mlp(const Tensor& n, BlockActs& a) const {
  const LayerParams& lp = params();
  const int64_t N = rows(), C = m_.cfg_.n_embd;
  a.mlp_in = n;
  a.h = act({N, m_.hidden_});
  linear::forward(m_, n, m_.W(lp.fc), a.h);
  a.act = activation(a.h);
  Tensor out = act({N, C});
  linear::forward(m_, a.act, m_.W(lp.proj), out);
  tp::reduce_outputs(m_.par_.tp_comm(), out);
  return out;
}

Tensor TrainKit::mlp_backward(const Tensor& dm, BlockActs& a) const {
  const LayerParams& lp = params();
  const int64_t N = rows(), C = m_.cfg_.n_embd;
  if (!a.act.defined()) a.act = activation(a.h);  // --recompute mlp dropped it
  Tensor dact = act({N, m_.hidden_});
  linear::backward_dw(m_, a.act, dm, lp.proj);
  linear::backward_dx(m_, dm, m_.W(lp.proj), dact, false);
  Tensor dh = act({N, m_.hidden_});
  if (m_.cfg_.mlp_act == "relu")
    ops::relu_backward(a.h, dact, dh, false);
  else
    ops::relu2_backward(a.h, dact, dh, false);
  linear::backward_dw(m_, a.mlp_in, dh, lp.fc);
  Tensor dn = act({N, C});
  linear::backward_dx(m_, dh, m_.W(lp.fc), dn, false);
  tp::reduce_input_grads(m_.par_.tp_comm(), dn);
  return dn;
}

}  // namespace vt
