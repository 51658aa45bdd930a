// The CPU backend's kernels: the fp32 reference implementation of every op, templated on the
// scalar type so tests can run them in float64 for finite-difference checks. All arrays are
// row-major and contiguous unless a leading dimension is given. Backward kernels write
// activation gradients (=) unless `accumulate` is true, in which case they add (+=).
// Instantiated for float and double in the .cc files.
#pragma once
#include <cstdint>

namespace vt::cpu {

// C(M,N) = alpha * op(A) * op(B) + beta * C. op(A) is (M,K), op(B) is (K,N).
// A is stored (M,K) with leading dim lda, or (K,M) when trans_a. Same for B.
// float -> cblas_sgemm, double -> cblas_dgemm.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// RMSNorm without weight over rows of width C:
//   rstd[r] = 1 / sqrt(mean_c(x[r,c]^2) + eps),  y[r,c] = scale * x[r,c] * rstd[r].
// y may alias x. rstd has `rows` entries (saved for backward).
template <class T>
void rmsnorm_forward(const T* x, T* y, T* rstd, int64_t rows, int64_t C, T scale, double eps);
// dx = scale * rstd * (dy - x * rstd^2 * mean_c(dy * x)). With dy2, the upstream gradient is
// g = dy + dy2 (two branches reading one norm), formed per element and rounded to bf16 first when
// round_bf16 (what an axpy into a bf16 dy followed by this kernel reads), never stored.
template <class T>
void rmsnorm_backward(const T* x, const T* rstd, const T* dy, T* dx, int64_t rows, int64_t C,
                      T scale, bool accumulate, const T* dy2 = nullptr, bool round_bf16 = false);
// The residual add fused with the RMSNorm that reads it: per row, x += delta (in place; the sum
// rounded to bf16 when round_bf16, as a bf16 stream stores it), keep (when not null) = the new
// x, then rstd and y = scale * x * rstd of the new x as rmsnorm_forward computes them. y must
// not alias x, delta or keep.
template <class T>
void add_rmsnorm_forward(T* x, const T* delta, T* keep, T* y, T* rstd, int64_t rows, int64_t C,
                         T scale, double eps, bool round_bf16);

// Rotary embedding over the whole head dim, rotate-half pairing (j with j + hd/2), positions
// t = 0..T-1 (plus pos_offset), inv_freq_j = base^(-2j/hd) for j < hd/2:
//   y[j]      = x[j] cos(t*f_j) - x[j+hd/2] sin(t*f_j)
//   y[j+hd/2] = x[j+hd/2] cos(t*f_j) + x[j] sin(t*f_j)
// x, y: (B, T, heads, hd); y may alias x.
template <class T>
void rope_forward(const T* x, T* y, int64_t B, int64_t Tn, int64_t heads, int64_t hd, double base,
                  int64_t pos_offset = 0);
// The transpose (inverse rotation) applied to dy; dx may alias dy.
template <class T>
void rope_backward(const T* dy, T* dx, int64_t B, int64_t Tn, int64_t heads, int64_t hd,
                   double base, int64_t pos_offset = 0);
// RoPE fused with the QK-norm that reads it: per (b, t, head), y = scale * rstd * R x with R the
// rotation of rope_forward and rstd = 1/sqrt(mean_j(x[j]^2) + eps) from x itself (a rotation
// keeps the head vector's norm, so this is rmsnorm_forward(rope_forward(x)) without the rotated
// copy). rstd: (B*T*heads). y may alias x.
template <class T>
void rope_rmsnorm_forward(const T* x, T* y, T* rstd, int64_t B, int64_t Tn, int64_t heads,
                          int64_t hd, double base, T scale, double eps, int64_t pos_offset = 0);
// Its backward from the saved (pre-RoPE) x and rstd: with g = R^T dy,
//   dx = scale * rstd * (g - x * rstd^2 * mean_j(g[j] * x[j]))
// (rmsnorm_backward of the rotated x, then rope_backward, in one pass). dx may alias dy.
template <class T>
void rope_rmsnorm_backward(const T* x, const T* rstd, const T* dy, T* dx, int64_t B, int64_t Tn,
                           int64_t heads, int64_t hd, double base, T scale,
                           int64_t pos_offset = 0);

// Causal attention with a sliding window and grouped-query heads.
// Query t sees key s iff 0 <= t - s < window (window >= T means full causal context).
// Query head h reads KV head h / (H / Hkv).
struct AttnShape {
  int64_t B = 1, T = 1, H = 1, Hkv = 1, hd = 1;
  int64_t window = 1;
};
// q: (B,T,H,hd), k, v: (B,T,Hkv,hd), out: (B,T,H,hd), lse: (B,H,T) natural-log sum-exp of the
// scaled scores of each query row (saved for backward). Blocked: extra memory is
// O(block * (window + block)) per thread, never O(T^2) for windowed layers.
// bias (optional, (T, T) row-major [query][key]): a fixed additive bias on the scaled scores,
// shared by batch and heads (--attn-bias); masked entries are never read.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* out, T* lse, const AttnShape& s,
                       T scale, const T* bias = nullptr);
// Writes dq (B,T,H,hd), dk, dv (B,T,Hkv,hd) (=, not +=) given dout and the saved out/lse.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* dout, T* dq, T* dk, T* dv, const AttnShape& s, T scale,
                        const T* bias = nullptr);

// The E-SPA/U-SPA parts of the mix (--attn-bias; docs/model.md "Block shapes"): rowscale
// (f32 (T,), null = 1) is D[t], the row sum of the target attention matrix A_l, multiplying the
// softmax and centring terms (the location-dependent rescaling); centre (like v, null = the
// running mean) is the centring term C v computed by the caller (the zero-query attention under
// the bias); dcentre (like v, written =, non-null exactly when centre is) receives its gradient.
template <class T>
struct MixSpa {
  const float* rowscale = nullptr;
  const T* centre = nullptr;
  T* dcentre = nullptr;
};

// The shaped-attention and NeuTRENO terms added to softmax attention (docs/model.md, "Block
// shapes" and "Value paths"): for query head h of KV group g = h / (H / Hkv) at position t,
//   out = D[t] (beta[h] * soft - gamma[h] * M[t,g]) + alpha[h] * v[t,g] + lam * (v1[t,g] - v[t,g])
// where soft (B,T,H,hd) is softmax attention's output, D = spa.rowscale (1 when null) and M[t]
// spa.centre[t] or, when that is null, the mean of v over the keys t sees (s in
// [max(0, t - W + 1), t]): the running mean (C v) of the "uniform causal" matrix, computed by
// running sums (O(T) per channel, never a T x T matrix). A null alpha/gamma means 0, a null
// beta 1; v1 is read only when lam != 0.
template <class T>
void attention_mix_forward(const T* soft, const T* v, const T* v1, const float* alpha,
                           const float* beta, const float* gamma, float lam, T* out,
                           const AttnShape& s, const MixSpa<T>& spa = {});
// Backward: dsoft = D beta * dout (=); dv += the identity, running-mean and NeuTRENO terms;
// dalpha/dbeta/dgamma (H) += their gradients (when non-null); dv1 = lam * sum_h dout (= , when
// non-null); with spa.centre, spa.dcentre = -D sum_h gamma[h] dout (=) instead of the running
// mean's term in dv. Deterministic whatever the thread count.
template <class T>
void attention_mix_backward(const T* dout, const T* soft, const T* v, const T* v1,
                            const float* alpha, const float* beta, const float* gamma, float lam,
                            T* dsoft, T* dv, float* dalpha, float* dbeta, float* dgamma, T* dv1,
                            const AttnShape& s, const MixSpa<T>& spa = {});

// y = relu(x)^2 elementwise; dx = 2 * relu(x) * dy.
template <class T>
void relu2_forward(const T* x, T* y, int64_t n);
template <class T>
void relu2_backward(const T* x, const T* dy, T* dx, int64_t n, bool accumulate);
// y = relu(x) elementwise; dx = [x > 0] * dy (--mlp-act relu).
template <class T>
void relu_forward(const T* x, T* y, int64_t n);
template <class T>
void relu_backward(const T* x, const T* dy, T* dx, int64_t n, bool accumulate);

// Soft-capped cross-entropy, written so that the vocabulary may be split across ranks.
// logits: (N, ld) raw (uncapped) logits of the local vocabulary slice, whose column c is global
// vocabulary id col_offset + c; only the first n_valid columns are real (padding is ignored).
// Capped value z = cap * tanh(logit / cap). Per row n this computes over the valid columns
//   row_max[n] = max z,  row_sumexp[n] = sum exp(z - row_max[n]),
//   target_z[n] = z at column targets[n] - col_offset if that column is local and valid, else 0.
// A caller combines slices (max, rescaled sums, summed target_z) into
//   lse = max + log(sumexp),  loss[n] = lse - target_z.
template <class T>
void xent_partial_forward(const T* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, T cap, T* row_max,
                          T* row_sumexp, T* target_z);
// dlogits[n,c] = dloss[n] * (exp(z - lse[n]) - [global c == target]) * (1 - tanh^2(logit/cap))
// for valid columns, 0 for padding columns. Written (=).
template <class T>
void xent_backward(const T* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
                   const int32_t* targets, T cap, const T* lse, const T* dloss, T* dlogits);
// The loss end in one pass per row when the slice is the whole vocabulary (no sharding to
// combine): xent_partial_forward, lse = row_max + log(row_sumexp), loss = lse - target_z, and
// xent_backward with dloss[n] = grad_scale, all from one read of each row. dlogits may be logits
// itself (in place: each row is read whole before any of it is written). The float kernel does
// the unfused kernels' arithmetic in their order, so its lse, loss and dlogits equal theirs bit
// for bit (cpu_kernels_test XentLossGrad*).
template <class T>
void xent_loss_grad(const T* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
                    const int32_t* targets, T cap, T grad_scale, T* lse, T* loss, T* dlogits);

// Row gather from a table whose rows [row_begin, row_begin + rows) are owned locally:
// out[n,:] = table[ids[n] - row_begin, :] if owned, else 0. out: (N, C).
template <class T>
void embedding_forward(const T* table, int64_t row_begin, int64_t rows, int64_t C,
                       const int32_t* ids, int64_t N, T* out);
// Scatter-add: dtable[ids[n] - row_begin, :] += dout[n, :] for owned ids (deterministic order).
template <class T>
void embedding_backward(const T* dout, const int32_t* ids, int64_t N, int64_t row_begin,
                        int64_t rows, int64_t C, T* dtable);

}  // namespace vt::cpu
