// The transformer block of MODEL.md section 1 (pre-norm attention with RoPE, QK-norm, sliding
// windows and GQA; relu^2 MLP) and the value path of section 2 that feeds its attention, with
// their explicit backward. Tensor parallelism: heads and MLP columns are local; the residual
// stream is replicated and all-reduced after W_O and W_proj; input-gradients of norms are
// all-reduced in backward.
#include <cmath>

#include "core/ops.h"
#include "model/gpt.h"
#include "model/value_mix.h"

namespace vt {

namespace {

// grad += alpha * dv, allocating grad on first use.
void accumulate(Tensor& grad, const Tensor& dv, float alpha) {
  if (!grad.defined()) grad = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
  ops::axpy(grad, dv, alpha);
}

}  // namespace

// Rows of a vocabulary-sharded value table for this rank's heads: each TP rank looks up the rows
// it owns (zeros elsewhere), then a reduce-scatter over the head dimension sums the pieces and
// leaves each rank its own heads. out: (N, kv_heads_local * hd) in the activation dtype.
static void table_lookup(const Tensor& table, int64_t row_begin, const Tensor& ids,
                         const Tensor& out, Communicator* tp) {
  const int64_t N = ids.numel(), K = table.dim(-1), Kl = out.numel() / N;
  if (tp->size() == 1) {
    ops::embedding(table, row_begin, ids, out);
    return;
  }
  const int P = tp->size();
  Tensor full = Tensor::zeros({N, K}, out.dtype(), out.device());
  ops::embedding(table, row_begin, ids, full);
  Tensor by_rank = Tensor::zeros({P, N, Kl}, out.dtype(), out.device());  // (rank, N, heads)
  for (int r = 0; r < P; ++r) ops::copy_2d(by_rank, r * N * Kl, Kl, full, r * Kl, K, N, Kl);
  tp->reduce_scatter_sum(by_rank, out);
}

// Backward of table_lookup: gather every rank's head slice of the gradient, scatter-add the
// rows this rank owns.
static void table_lookup_backward(const Tensor& de, const Tensor& dtable, int64_t row_begin,
                                  const Tensor& ids, Communicator* tp) {
  const int64_t N = ids.numel(), K = dtable.dim(-1);
  if (tp->size() == 1) {
    ops::embedding_backward(de, ids, row_begin, dtable);
    return;
  }
  const int P = tp->size();
  const int64_t Kl = K / P;
  Tensor by_rank = Tensor::zeros({P, N, Kl}, de.dtype(), de.device());
  tp->all_gather(de, by_rank);
  Tensor full = Tensor::zeros({N, K}, de.dtype(), de.device());
  for (int r = 0; r < P; ++r) ops::copy_2d(full, r * Kl, K, by_rank, r * N * Kl, Kl, N, Kl);
  ops::embedding_backward(full, ids, row_begin, dtable);
}

void GPT::blocks_forward(Bundle& bundle, Activations& acts) const {
  if (bundle.values.empty()) bundle.values.resize(cfg_.n_layer);
  acts.x0 = bundle.x0;
  if (plus_logits_ >= 0) {
    const std::vector<float> logits = P(plus_logits_).to_host_f32();
    const int64_t n = static_cast<int64_t>(logits.size());
    acts.plus_coef = resformer_plus_coefficients(cfg_, logits.data(), n);
    acts.plus_dcoef.assign(n, 0.0);
  }
  for (int i = begin_; i < end_; ++i) {
    BlockActs& a = acts.blocks[i - begin_];
    block_forward(i, bundle, acts, a);
    if (block_output_hook_) block_output_hook_(i, bundle.x);
    if (recompute_) {
      Tensor x_in = a.x_in;
      a = BlockActs{};
      a.x_in = x_in;
    }
  }
  acts.values = bundle.values;
}

void GPT::block_forward(int i, Bundle& bundle, Activations& acts, BlockActs& a) const {
  const LayerParams& lp = layers_[i - begin_];
  const int B = acts.B, T = cfg_.seq_len, hd = cfg_.head_dim;
  const int64_t N = static_cast<int64_t>(B) * T, C = cfg_.n_embd;
  const int64_t qd = static_cast<int64_t>(heads_) * hd, kvd = static_cast<int64_t>(kv_heads_) * hd;
  const float eps = cfg_.norm_eps;
  Communicator* tp = par_.tp_comm();
  Tensor& x = bundle.x;  // (B, T, C), updated in place

  // Attention input.
  a.x_in = x.clone();
  a.n1 = act({N, C});
  a.rstd1 = f32({N});
  ops::rmsnorm(a.x_in, a.n1, a.rstd1, 1.0f, eps);
  Tensor q = act({B, T, heads_, hd});
  Tensor k = act({B, T, kv_heads_, hd});
  ops::matmul(a.n1, W(lp.wq), q);
  ops::matmul(a.n1, W(lp.wk), k);

  // Value path.
  const bool target = cfg_.is_target(i);
  const ValueMode mode = cfg_.value_mode;
  if (lp.wv >= 0) {
    a.ctx_v = act({B, T, kv_heads_, hd});
    const Tensor& src = (target && mode == ValueMode::kX0v) ? bundle.x0 : a.n1;
    ops::matmul(src, W(lp.wv), a.ctx_v);
    if (keeps_value(i)) bundle.values[i] = a.ctx_v;
  }
  if (target && mode_has_table(mode)) {
    a.emb = act({B, T, kv_heads_, hd});
    table_lookup(P(lp.table), vocab_offset_, acts.input_ids, a.emb.reshaped({N, kv_heads_ * hd}),
                 tp);
  }
  a.v = act({B, T, kv_heads_, hd});
  if (!target) {
    ops::copy(a.v, a.ctx_v);
  } else {
    ValueSources src;
    if (mode_reads_v1(mode)) src.v1 = bundle.values[0];
    src.ctx = a.ctx_v;
    src.emb = a.emb;
    src.gate_in = a.n1;
    if (mode_reads_all_values(mode))
      for (int j = 0; j < i; ++j) src.values.push_back(bundle.values[j]);
    if (mode == ValueMode::kResformerPlus) src.plus_coef = acts.plus_coef[cfg_.target_index(i)];
    if (mode == ValueMode::kValueEmbed) a.gate = f32({N, kv_heads_});
    value_mix_forward(cfg_, lp, *store_, i, src, N, kv_heads_, a.v, a.gate);
  }

  // RoPE, QK-norm, attention.
  const double base = cfg_.rope_base;
  const float qk_scale = cfg_.qk_norm_scale;
  a.q_r = act(q.shape());
  a.k_r = act(k.shape());
  ops::rope(q, a.q_r, base);
  ops::rope(k, a.k_r, base);
  a.qn = act(q.shape());
  a.kn = act(k.shape());
  a.rstd_q = f32({N * heads_});
  a.rstd_k = f32({N * kv_heads_});
  ops::rmsnorm(a.q_r, a.qn, a.rstd_q, qk_scale, eps);
  ops::rmsnorm(a.k_r, a.kn, a.rstd_k, qk_scale, eps);
  a.y = act(q.shape());
  a.lse = f32({B, heads_, T});
  ops::attention(a.qn, a.kn, a.v, a.y, a.lse, cfg_.layer_window(i),
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
  Tensor o = act({N, C});
  ops::matmul(a.y.reshaped({N, qd}), W(lp.wo), o);
  tp->all_reduce_sum(o);
  ops::axpy(x, o);

  // MLP.
  a.x_mid = x.clone();
  a.n2 = act({N, C});
  a.rstd2 = f32({N});
  ops::rmsnorm(a.x_mid, a.n2, a.rstd2, 1.0f, eps);
  a.h = act({N, hidden_});
  ops::matmul(a.n2, W(lp.fc), a.h);
  a.act = act({N, hidden_});
  ops::relu2(a.h, a.act);
  Tensor m = act({N, C});
  ops::matmul(a.act, W(lp.proj), m);
  tp->all_reduce_sum(m);
  ops::axpy(x, m);
  (void)kvd;
}

void GPT::blocks_backward(Bundle& grad, Activations& acts) const {
  if (grad.values.empty()) grad.values.resize(cfg_.n_layer);
  for (int i = end_ - 1; i >= begin_; --i) {
    if (recompute_) {
      // Rerun this block's forward from its saved input. Earlier layers' values and x0 come from
      // the saved forward state; what the rerun writes into its scratch bundle is dropped.
      Bundle scratch;
      scratch.x = acts.blocks[i - begin_].x_in.clone();
      scratch.x0 = acts.x0;
      scratch.values = acts.values;
      block_forward(i, scratch, acts, acts.blocks[i - begin_]);
    }
    block_backward(i, grad, acts, acts.blocks[i - begin_]);
    if (layer_grads_hook_) layer_grads_hook_(i);
    acts.blocks[i - begin_] = BlockActs{};  // free as we go
  }
  if (plus_logits_ >= 0) {
    // coef = s * p; d logits_j = p_j (g_j - sum_k p_k g_k) with g = s * dcoef.
    const double s = cfg_.n_layer;
    const int64_t n = acts.plus_coef.size();
    double pg = 0.0;
    for (int64_t k = 0; k < n; ++k) pg += (acts.plus_coef[k] / s) * s * acts.plus_dcoef[k];
    for (int64_t j = 0; j < n; ++j) {
      const double p = acts.plus_coef[j] / s;
      ops::add_scalar(G(plus_logits_), j, p * (s * acts.plus_dcoef[j] - pg));
    }
  }
}

void GPT::block_backward(int i, Bundle& grad, Activations& acts, BlockActs& a) const {
  const LayerParams& lp = layers_[i - begin_];
  const int B = acts.B, T = cfg_.seq_len, hd = cfg_.head_dim;
  const int64_t N = static_cast<int64_t>(B) * T, C = cfg_.n_embd;
  const int64_t qd = static_cast<int64_t>(heads_) * hd;
  Communicator* tp = par_.tp_comm();
  Tensor& dx = grad.x;  // (B, T, C), d loss / d block output; becomes d / d block input

  // MLP.
  Tensor dact = act({N, hidden_});
  ops::matmul_dw(a.act, dx, G(lp.proj));
  ops::matmul_dx(dx, W(lp.proj), dact, false);
  Tensor dh = act({N, hidden_});
  ops::relu2_backward(a.h, dact, dh, false);
  ops::matmul_dw(a.n2, dh, G(lp.fc));
  Tensor dn2 = act({N, C});
  ops::matmul_dx(dh, W(lp.fc), dn2, false);
  tp->all_reduce_sum(dn2);
  ops::rmsnorm_backward(a.x_mid, a.rstd2, dn2, dx, 1.0f, true);

  // Attention output projection and attention.
  ops::matmul_dw(a.y.reshaped({N, qd}), dx, G(lp.wo));
  Tensor dy = act(a.y.shape());
  ops::matmul_dx(dx, W(lp.wo), dy, false);
  Tensor dqn = act(a.qn.shape()), dkn = act(a.kn.shape());
  Tensor dv = act(a.v.shape());
  ops::attention_backward(a.qn, a.kn, a.v, a.y, a.lse, dy, dqn, dkn, dv, cfg_.layer_window(i),
                          static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
  const float qk_scale = cfg_.qk_norm_scale;
  Tensor dq = act(a.q_r.shape()), dk = act(a.k_r.shape());
  ops::rmsnorm_backward(a.q_r, a.rstd_q, dqn, dq, qk_scale, false);
  ops::rmsnorm_backward(a.k_r, a.rstd_k, dkn, dk, qk_scale, false);
  ops::rope_backward(dq, dq, cfg_.rope_base);
  ops::rope_backward(dk, dk, cfg_.rope_base);

  // Value path backward: dv -> d ctx_v, d earlier values, scalars, tables, gates.
  Tensor dn1 = act({N, C});
  Tensor dctx;
  if (lp.wv >= 0) dctx = act(a.v.shape());
  const bool target = cfg_.is_target(i);
  const ValueMode mode = cfg_.value_mode;
  const bool v1_grad = !cfg_.detach_v1;
  // d scalar = sum(dv * src), summed over the TP group's heads. resformer-plus needs it on the
  // host (its softmax backward runs there); every other scalar gradient stays on the device.
  auto dscalar_host = [&](const Tensor& src) {
    double s = ops::dot(dv, src);
    tp->all_reduce_sum(&s, 1);
    return s;
  };
  auto grad_scalar = [&](int idx, int elem, const Tensor& src) {
    Tensor s = f32({1});
    ops::dot_into(dv, src, s);
    tp->all_reduce_sum(s);
    ops::axpy(G(idx).flat(elem, 1), s, 1.0f);
  };
  auto to_v1 = [&](float coef) {
    if (v1_grad) accumulate(grad.values[0], dv, coef);
  };
  // grad += coef[elem] * dv with the coefficient read on the device.
  auto accumulate_coef = [&](Tensor& g, const Tensor& coef, int elem) {
    if (!g.defined()) g = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
    ops::axpy_coef(g, dv, coef, elem);
  };
  auto to_v1_coef = [&](const Tensor& coef) {
    if (v1_grad) accumulate_coef(grad.values[0], coef, 0);
  };
  if (!target) {
    ops::copy(dctx, dv);
  } else {
    const Tensor& v1 = acts.values.empty() ? Tensor() : acts.values[0];
    switch (mode) {
      case ValueMode::kResformerIdentity:
        to_v1(0.5f);
        ops::scale_copy(dctx, dv, 0.5f);
        break;
      case ValueMode::kResformerConstant:
        to_v1(2.0f);
        ops::copy(dctx, dv);
        break;
      case ValueMode::kResformerSparse:
        to_v1(5.0f);
        ops::copy(dctx, dv);
        break;
      case ValueMode::kResformerLearnable: {
        grad_scalar(lp.lambda1, 0, v1);
        grad_scalar(lp.lambda2, 0, a.ctx_v);
        to_v1_coef(P(lp.lambda1));
        ops::scale_copy_coef(dctx, dv, P(lp.lambda2));
        break;
      }
      case ValueMode::kResformerPlus: {
        const int k = cfg_.target_index(i);
        acts.plus_dcoef[k] += dscalar_host(v1);
        grad_scalar(lp.lambda2, 0, a.ctx_v);
        to_v1(static_cast<float>(acts.plus_coef[k]));
        ops::scale_copy_coef(dctx, dv, P(lp.lambda2));
        break;
      }
      case ValueMode::kResformerDense: {
        const Tensor l = P(lp.dense);
        for (int j = 0; j < i; ++j) {
          grad_scalar(lp.dense, j, acts.values[j]);
          if (j > 0 || v1_grad) accumulate_coef(grad.values[j], l, j);
        }
        grad_scalar(lp.dense, i, a.ctx_v);
        ops::scale_copy_coef(dctx, dv, l, i);
        break;
      }
      case ValueMode::kSvformer: to_v1(1.0f); break;
      case ValueMode::kV1:
        grad_scalar(lp.gain, 0, v1);
        to_v1_coef(P(lp.gain));
        break;
      case ValueMode::kX0v:
        grad_scalar(lp.gain, 0, a.ctx_v);
        ops::scale_copy_coef(dctx, dv, P(lp.gain));
        break;
      case ValueMode::kBov: {
        grad_scalar(lp.gain, 0, a.emb);
        Tensor de = act(dv.shape());
        ops::scale_copy_coef(de, dv, P(lp.gain));
        table_lookup_backward(de.reshaped({N, kv_heads_ * hd}), G(lp.table),
                              vocab_offset_, acts.input_ids, tp);
        break;
      }
      case ValueMode::kBovAdd: {
        Tensor de = act(dv.shape());
        if (lp.a >= 0) {
          grad_scalar(lp.a, 0, a.ctx_v);
          grad_scalar(lp.b, 0, a.emb);
          ops::scale_copy_coef(dctx, dv, P(lp.a));
          ops::scale_copy_coef(de, dv, P(lp.b));
        } else {
          ops::scale_copy(dctx, dv, 0.5f);
          ops::scale_copy(de, dv, 0.5f);
        }
        table_lookup_backward(de.reshaped({N, kv_heads_ * hd}), G(lp.table), vocab_offset_,
                              acts.input_ids, tp);
        break;
      }
      case ValueMode::kValueEmbed: {
        ops::copy(dctx, dv);
        const float gs = cfg_.value_embed_gate_scale;
        const int Gc = cfg_.value_embed_gate_channels;
        // v = ctx + g * emb, g = gs * sigmoid(z), z = n1[:, :Gc] W_g.
        Tensor de = act(dv.shape());
        Tensor dgate = f32({N, kv_heads_});
        ops::gated_mix_backward(dv, a.emb, a.gate, de, dgate);
        Tensor dz = act({N, kv_heads_});
        ops::gate_sigmoid_backward(a.gate, dgate, gs, dz);
        // d W_g += n1[:, :Gc]^T dz ; d n1[:, :Gc] += dz W_g^T
        GemmArgs gw;
        gw.trans_a = true;
        gw.M = Gc, gw.N = kv_heads_, gw.K = N;
        gw.A = a.n1, gw.lda = C;
        gw.B = dz, gw.ldb = kv_heads_;
        gw.C = G(lp.gate_w), gw.ldc = kv_heads_;
        gw.beta = 1.0f;
        ops::gemm(gw);
        GemmArgs gx;
        gx.trans_b = true;
        gx.M = N, gx.N = Gc, gx.K = kv_heads_;
        gx.A = dz, gx.lda = kv_heads_;
        gx.B = W(lp.gate_w), gx.ldb = kv_heads_;
        gx.C = dn1, gx.ldc = C;
        gx.beta = 1.0f;
        ops::gemm(gx);
        table_lookup_backward(de.reshaped({N, kv_heads_ * hd}), G(lp.table), vocab_offset_,
                              acts.input_ids, tp);
        break;
      }
      case ValueMode::kBaseline: ops::copy(dctx, dv); break;
    }
  }
  // Gradient that later layers sent back to this layer's context value (V1, dense values).
  if (lp.wv >= 0 && grad.values.size() > static_cast<size_t>(i) && grad.values[i].defined()) {
    ops::axpy(dctx, grad.values[i]);
    grad.values[i] = Tensor();
  }

  // Projections into q, k, v.
  ops::matmul_dw(a.n1, dq.reshaped({N, qd}), G(lp.wq));
  ops::matmul_dx(dq.reshaped({N, qd}), W(lp.wq), dn1, true);
  ops::matmul_dw(a.n1, dk.reshaped({N, kv_heads_ * hd}), G(lp.wk));
  ops::matmul_dx(dk.reshaped({N, kv_heads_ * hd}), W(lp.wk), dn1, true);
  if (lp.wv >= 0) {
    const Tensor dctx2 = dctx.reshaped({N, kv_heads_ * hd});
    if (target && mode == ValueMode::kX0v) {
      ops::matmul_dw(acts.x0, dctx2, G(lp.wv));
      Tensor dx0 = act({N, C});
      ops::matmul_dx(dctx2, W(lp.wv), dx0, false);
      tp->all_reduce_sum(dx0);
      ops::axpy(grad.x0, dx0);
    } else {
      ops::matmul_dw(a.n1, dctx2, G(lp.wv));
      ops::matmul_dx(dctx2, W(lp.wv), dn1, true);
    }
  }
  tp->all_reduce_sum(dn1);
  ops::rmsnorm_backward(a.x_in, a.rstd1, dn1, dx, 1.0f, true);
}

}  // namespace vt
