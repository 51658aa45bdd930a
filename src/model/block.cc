// The transformer block of MODEL.md section 1 (pre-norm attention with RoPE, QK-norm, sliding
// windows and GQA; relu^2 MLP) and the value path of section 2 that feeds its attention, with
// their explicit backward. Tensor parallelism: heads and MLP columns are local; the residual
// stream is replicated and all-reduced after W_O and W_proj; input-gradients of norms are
// all-reduced in backward.
#include <cmath>

#include "core/cpu_kernels.h"
#include "core/ops.h"
#include "model/gpt.h"
#include "model/value_mix.h"

namespace vt {

namespace {

float scalar(const Tensor& t) { return t.f32()[0]; }

// grad += alpha * dv, allocating grad on first use.
void accumulate(Tensor& grad, const Tensor& dv, float alpha) {
  if (!grad.defined()) grad = Tensor::zeros(dv.shape());
  ops::axpy(grad, dv, alpha);
}

}  // namespace

// Rows of a vocabulary-sharded value table for this rank's heads: each TP rank looks up the rows
// it owns (zeros elsewhere), then a reduce-scatter over the head dimension sums the pieces and
// leaves each rank its own heads.
static Tensor table_lookup(const Tensor& table, int64_t row_begin, const int32_t* ids, int64_t N,
                           int kv_heads_local, int hd, Communicator* tp) {
  const int64_t K = table.dim(-1);  // all KV heads
  const int64_t Kl = static_cast<int64_t>(kv_heads_local) * hd;
  Tensor full = Tensor::zeros({N, K});
  ops::embedding(table, row_begin, ids, full);
  if (tp->size() == 1) return full;
  const int P = tp->size();
  Tensor by_rank = Tensor::zeros({P, N, Kl});  // (rank, N, local heads)
  for (int r = 0; r < P; ++r)
    for (int64_t n = 0; n < N; ++n)
      std::copy(full.f32() + n * K + r * Kl, full.f32() + n * K + (r + 1) * Kl,
                by_rank.f32() + (r * N + n) * Kl);
  Tensor out = Tensor::zeros({N, Kl});
  tp->reduce_scatter_sum(by_rank.f32(), out.f32(), N * Kl);
  return out;
}

// Backward of table_lookup: gather every rank's head slice of the gradient, scatter-add the
// rows this rank owns.
static void table_lookup_backward(const Tensor& de, const Tensor& dtable, int64_t row_begin,
                                  const int32_t* ids, int64_t N, Communicator* tp) {
  const int64_t K = dtable.dim(-1);
  if (tp->size() == 1) {
    ops::embedding_backward(de, ids, row_begin, dtable);
    return;
  }
  const int P = tp->size();
  const int64_t Kl = K / P;
  Tensor by_rank = Tensor::zeros({P, N, Kl});
  tp->all_gather(de.f32(), by_rank.f32(), N * Kl);
  Tensor full = Tensor::zeros({N, K});
  for (int r = 0; r < P; ++r)
    for (int64_t n = 0; n < N; ++n)
      std::copy(by_rank.f32() + (r * N + n) * Kl, by_rank.f32() + (r * N + n + 1) * Kl,
                full.f32() + n * K + r * Kl);
  ops::embedding_backward(full, ids, row_begin, dtable);
}

void GPT::blocks_forward(Bundle& bundle, Activations& acts) const {
  if (bundle.values.empty()) bundle.values.resize(cfg_.n_layer);
  acts.x0 = bundle.x0;
  if (plus_logits_ >= 0) {
    const Tensor logits = P(plus_logits_);
    const int64_t n = logits.numel();
    acts.plus_coef = resformer_plus_coefficients(cfg_, logits.f32(), n);
    acts.plus_dcoef.assign(n, 0.0);
  }
  for (int i = begin_; i < end_; ++i) block_forward(i, bundle, acts, acts.blocks[i - begin_]);
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
  a.n1 = Tensor::zeros({N, C});
  a.rstd1 = Tensor::zeros({N});
  ops::rmsnorm(a.x_in, a.n1, a.rstd1, 1.0f, eps);
  Tensor q = Tensor::zeros({B, T, heads_, hd});
  Tensor k = Tensor::zeros({B, T, kv_heads_, hd});
  ops::matmul(a.n1, P(lp.wq), q);
  ops::matmul(a.n1, P(lp.wk), k);

  // Value path.
  const bool target = cfg_.is_target(i);
  const ValueMode mode = cfg_.value_mode;
  if (lp.wv >= 0) {
    a.ctx_v = Tensor::zeros({B, T, kv_heads_, hd});
    const Tensor& src = (target && mode == ValueMode::kX0v) ? bundle.x0 : a.n1;
    ops::matmul(src, P(lp.wv), a.ctx_v);
    if (keeps_value(i)) bundle.values[i] = a.ctx_v;
  }
  if (target && mode_has_table(mode))
    a.emb = table_lookup(P(lp.table), vocab_offset_, acts.inputs.data(), N, kv_heads_, hd, tp)
                .reshaped({B, T, kv_heads_, hd});
  a.v = Tensor::zeros({B, T, kv_heads_, hd});
  if (!target) {
    ops::copy(a.v, a.ctx_v);
  } else {
    ValueSources src;
    if (mode_reads_v1(mode)) src.v1 = bundle.values[0].f32();
    if (a.ctx_v.defined()) src.ctx = a.ctx_v.f32();
    if (a.emb.defined()) src.emb = a.emb.f32();
    src.gate_in = a.n1.f32();
    src.gate_ld = C;
    if (mode_reads_all_values(mode))
      for (int j = 0; j < i; ++j) src.values.push_back(bundle.values[j].f32());
    if (mode == ValueMode::kResformerPlus) src.plus_coef = acts.plus_coef[cfg_.target_index(i)];
    if (mode == ValueMode::kValueEmbed) a.gate = Tensor::zeros({N, kv_heads_});
    value_mix_forward(cfg_, lp, *store_, i, src, N, kv_heads_, a.v.f32(),
                      a.gate.defined() ? a.gate.f32() : nullptr);
  }

  // RoPE, QK-norm, attention.
  const double base = cfg_.rope_base;
  const float qk_scale = cfg_.qk_norm_scale;
  a.q_r = Tensor::zeros(q.shape());
  a.k_r = Tensor::zeros(k.shape());
  ops::rope(q, a.q_r, base);
  ops::rope(k, a.k_r, base);
  a.qn = Tensor::zeros(q.shape());
  a.kn = Tensor::zeros(k.shape());
  a.rstd_q = Tensor::zeros({N * heads_});
  a.rstd_k = Tensor::zeros({N * kv_heads_});
  ops::rmsnorm(a.q_r, a.qn, a.rstd_q, qk_scale, eps);
  ops::rmsnorm(a.k_r, a.kn, a.rstd_k, qk_scale, eps);
  a.y = Tensor::zeros(q.shape());
  a.lse = Tensor::zeros({B, heads_, T});
  ops::attention(a.qn, a.kn, a.v, a.y, a.lse, cfg_.layer_window(i),
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
  Tensor o = Tensor::zeros({N, C});
  ops::matmul(a.y.reshaped({N, qd}), P(lp.wo), o);
  tp->all_reduce_sum(o.f32(), N * C);
  ops::axpy(x, o);

  // MLP.
  a.x_mid = x.clone();
  a.n2 = Tensor::zeros({N, C});
  a.rstd2 = Tensor::zeros({N});
  ops::rmsnorm(a.x_mid, a.n2, a.rstd2, 1.0f, eps);
  a.h = Tensor::zeros({N, hidden_});
  ops::matmul(a.n2, P(lp.fc), a.h);
  a.act = Tensor::zeros({N, hidden_});
  ops::relu2(a.h, a.act);
  Tensor m = Tensor::zeros({N, C});
  ops::matmul(a.act, P(lp.proj), m);
  tp->all_reduce_sum(m.f32(), N * C);
  ops::axpy(x, m);
  (void)kvd;
}

void GPT::blocks_backward(Bundle& grad, Activations& acts) const {
  if (grad.values.empty()) grad.values.resize(cfg_.n_layer);
  for (int i = end_ - 1; i >= begin_; --i) {
    block_backward(i, grad, acts, acts.blocks[i - begin_]);
    acts.blocks[i - begin_] = BlockActs{};  // free as we go
  }
  if (plus_logits_ >= 0) {
    // coef = s * p; d logits_j = p_j (g_j - sum_k p_k g_k) with g = s * dcoef.
    const double s = cfg_.n_layer;
    const int64_t n = acts.plus_coef.size();
    double pg = 0.0;
    for (int64_t k = 0; k < n; ++k) pg += (acts.plus_coef[k] / s) * s * acts.plus_dcoef[k];
    float* g = G(plus_logits_).f32();
    for (int64_t j = 0; j < n; ++j) {
      const double p = acts.plus_coef[j] / s;
      g[j] += static_cast<float>(p * (s * acts.plus_dcoef[j] - pg));
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
  Tensor dact = Tensor::zeros({N, hidden_});
  ops::matmul_dw(a.act, dx, G(lp.proj));
  ops::matmul_dx(dx, P(lp.proj), dact, false);
  Tensor dh = Tensor::zeros({N, hidden_});
  ops::relu2_backward(a.h, dact, dh, false);
  ops::matmul_dw(a.n2, dh, G(lp.fc));
  Tensor dn2 = Tensor::zeros({N, C});
  ops::matmul_dx(dh, P(lp.fc), dn2, false);
  tp->all_reduce_sum(dn2.f32(), N * C);
  ops::rmsnorm_backward(a.x_mid, a.rstd2, dn2, dx, 1.0f, true);

  // Attention output projection and attention.
  ops::matmul_dw(a.y.reshaped({N, qd}), dx, G(lp.wo));
  Tensor dy = Tensor::zeros(a.y.shape());
  ops::matmul_dx(dx, P(lp.wo), dy, false);
  Tensor dqn = Tensor::zeros(a.qn.shape()), dkn = Tensor::zeros(a.kn.shape());
  Tensor dv = Tensor::zeros(a.v.shape());
  ops::attention_backward(a.qn, a.kn, a.v, a.y, a.lse, dy, dqn, dkn, dv, cfg_.layer_window(i),
                          static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
  const float qk_scale = cfg_.qk_norm_scale;
  Tensor dq = Tensor::zeros(a.q_r.shape()), dk = Tensor::zeros(a.k_r.shape());
  ops::rmsnorm_backward(a.q_r, a.rstd_q, dqn, dq, qk_scale, false);
  ops::rmsnorm_backward(a.k_r, a.rstd_k, dkn, dk, qk_scale, false);
  ops::rope_backward(dq, dq, cfg_.rope_base);
  ops::rope_backward(dk, dk, cfg_.rope_base);

  // Value path backward: dv -> d ctx_v, d earlier values, scalars, tables, gates.
  Tensor dn1 = Tensor::zeros({N, C});
  Tensor dctx;
  if (lp.wv >= 0) dctx = Tensor::zeros(a.v.shape());
  const bool target = cfg_.is_target(i);
  const ValueMode mode = cfg_.value_mode;
  const bool v1_grad = !cfg_.detach_v1;
  // d scalar = sum(dv * src), summed over the TP group's heads.
  auto dscalar = [&](const Tensor& src) {
    double s = ops::dot(dv, src);
    tp->all_reduce_sum(&s, 1);
    return s;
  };
  auto add_scalar_grad = [&](int idx, int elem, double g) {
    G(idx).f32()[elem] += static_cast<float>(g);
  };
  auto to_v1 = [&](float coef) {
    if (v1_grad) accumulate(grad.values[0], dv, coef);
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
        add_scalar_grad(lp.lambda1, 0, dscalar(v1));
        add_scalar_grad(lp.lambda2, 0, dscalar(a.ctx_v));
        to_v1(scalar(P(lp.lambda1)));
        ops::scale_copy(dctx, dv, scalar(P(lp.lambda2)));
        break;
      }
      case ValueMode::kResformerPlus: {
        const int k = cfg_.target_index(i);
        acts.plus_dcoef[k] += dscalar(v1);
        add_scalar_grad(lp.lambda2, 0, dscalar(a.ctx_v));
        to_v1(static_cast<float>(acts.plus_coef[k]));
        ops::scale_copy(dctx, dv, scalar(P(lp.lambda2)));
        break;
      }
      case ValueMode::kResformerDense: {
        const float* l = P(lp.dense).f32();
        for (int j = 0; j < i; ++j) {
          add_scalar_grad(lp.dense, j, dscalar(acts.values[j]));
          if (j > 0 || v1_grad) accumulate(grad.values[j], dv, l[j]);
        }
        add_scalar_grad(lp.dense, i, dscalar(a.ctx_v));
        ops::scale_copy(dctx, dv, l[i]);
        break;
      }
      case ValueMode::kSvformer: to_v1(1.0f); break;
      case ValueMode::kV1:
        add_scalar_grad(lp.gain, 0, dscalar(v1));
        to_v1(scalar(P(lp.gain)));
        break;
      case ValueMode::kX0v:
        add_scalar_grad(lp.gain, 0, dscalar(a.ctx_v));
        ops::scale_copy(dctx, dv, scalar(P(lp.gain)));
        break;
      case ValueMode::kBov: {
        add_scalar_grad(lp.gain, 0, dscalar(a.emb));
        Tensor de = Tensor::zeros(dv.shape());
        ops::scale_copy(de, dv, scalar(P(lp.gain)));
        table_lookup_backward(de.reshaped({N, kv_heads_ * hd}), G(lp.table),
                              vocab_offset_, acts.inputs.data(), N, tp);
        break;
      }
      case ValueMode::kBovAdd: {
        const float ca = lp.a >= 0 ? scalar(P(lp.a)) : 0.5f;
        const float cb = lp.b >= 0 ? scalar(P(lp.b)) : 0.5f;
        if (lp.a >= 0) add_scalar_grad(lp.a, 0, dscalar(a.ctx_v));
        if (lp.b >= 0) add_scalar_grad(lp.b, 0, dscalar(a.emb));
        ops::scale_copy(dctx, dv, ca);
        Tensor de = Tensor::zeros(dv.shape());
        ops::scale_copy(de, dv, cb);
        table_lookup_backward(de.reshaped({N, kv_heads_ * hd}), G(lp.table), vocab_offset_,
                              acts.inputs.data(), N, tp);
        break;
      }
      case ValueMode::kValueEmbed: {
        ops::copy(dctx, dv);
        const float gs = cfg_.value_embed_gate_scale;
        const int Gc = cfg_.value_embed_gate_channels;
        Tensor dz = Tensor::zeros({N, kv_heads_});
        Tensor de = Tensor::zeros(dv.shape());
        const float* pdv = dv.f32();
        const float* e = a.emb.f32();
        const float* g = a.gate.f32();
        float* pde = de.f32();
        for (int64_t n = 0; n < N; ++n)
          for (int h = 0; h < kv_heads_; ++h) {
            const int64_t gi = n * kv_heads_ + h;
            double dg = 0.0;
            for (int d = 0; d < hd; ++d) {
              const int64_t o = gi * hd + d;
              dg += static_cast<double>(pdv[o]) * e[o];
              pde[o] = g[gi] * pdv[o];
            }
            // g = gs * sigmoid(z): dg/dz = g * (1 - g / gs)
            dz.f32()[gi] = static_cast<float>(dg * g[gi] * (1.0 - g[gi] / gs));
          }
        // d W_g += n1[:, :Gc]^T dz ; d n1[:, :Gc] += dz W_g^T
        cpu::gemm<float>(true, false, Gc, kv_heads_, N, 1.0f, a.n1.f32(), C, dz.f32(), kv_heads_,
                         1.0f, G(lp.gate_w).f32(), kv_heads_);
        cpu::gemm<float>(false, true, N, Gc, kv_heads_, 1.0f, dz.f32(), kv_heads_,
                         P(lp.gate_w).f32(), kv_heads_, 1.0f, dn1.f32(), C);
        table_lookup_backward(de.reshaped({N, kv_heads_ * hd}), G(lp.table), vocab_offset_,
                              acts.inputs.data(), N, tp);
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
  ops::matmul_dx(dq.reshaped({N, qd}), P(lp.wq), dn1, true);
  ops::matmul_dw(a.n1, dk.reshaped({N, kv_heads_ * hd}), G(lp.wk));
  ops::matmul_dx(dk.reshaped({N, kv_heads_ * hd}), P(lp.wk), dn1, true);
  if (lp.wv >= 0) {
    const Tensor dctx2 = dctx.reshaped({N, kv_heads_ * hd});
    if (target && mode == ValueMode::kX0v) {
      ops::matmul_dw(acts.x0, dctx2, G(lp.wv));
      Tensor dx0 = Tensor::zeros({N, C});
      ops::matmul_dx(dctx2, P(lp.wv), dx0, false);
      tp->all_reduce_sum(dx0.f32(), N * C);
      ops::axpy(grad.x0, dx0);
    } else {
      ops::matmul_dw(a.n1, dctx2, G(lp.wv));
      ops::matmul_dx(dctx2, P(lp.wv), dn1, true);
    }
  }
  tp->all_reduce_sum(dn1.f32(), N * C);
  ops::rmsnorm_backward(a.x_in, a.rstd1, dn1, dx, 1.0f, true);
}

}  // namespace vt
