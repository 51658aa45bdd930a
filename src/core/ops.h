// The op interface the model calls: tensor-level wrappers that check shapes and dispatch on the
// tensor's device to a backend (today the CPU kernels of cpu_kernels.h; the CUDA backend plugs
// in here). Weights are 2-D (K, N); activations are any tensor viewed as (numel / K, K) rows.
#pragma once
#include "core/tensor.h"

namespace vt::ops {

// y (M,N) = x (M,K) @ w (K,N), or += when accumulate.
void matmul(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate = false);
// dx (M,K) = dy (M,N) @ w^T, or += when accumulate.
void matmul_dx(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate);
// dw (K,N) += x^T (K,M) @ dy (M,N).
void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw);

// y += alpha * x (same numel).
void axpy(const Tensor& y, const Tensor& x, float alpha = 1.0f);
// y = alpha * x.
void scale_copy(const Tensor& y, const Tensor& x, float alpha);
// sum(a * b) in double.
double dot(const Tensor& a, const Tensor& b);
// Copy x into y (same numel).
void copy(const Tensor& y, const Tensor& x);

int64_t rows_of(const Tensor& t);  // numel / last dim

// Fused model ops (semantics in cpu_kernels.h). Row width is the tensor's last dimension.
void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, float scale, double eps);
void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      float scale, bool accumulate);
// x, y: (B, T, heads, hd).
void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset = 0);
void rope_backward(const Tensor& dy, const Tensor& dx, double base, int64_t pos_offset = 0);
// q (B,T,H,hd), k/v (B,T,Hkv,hd), out (B,T,H,hd), lse (B,H,T).
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, int64_t window, float scale);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, int64_t window, float scale);
void relu2(const Tensor& x, const Tensor& y);
void relu2_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate);
// Rows [row_begin, row_begin + table.dim(0)) of a table; out (N, C) (zeros for rows not owned).
void embedding(const Tensor& table, int64_t row_begin, const int32_t* ids, const Tensor& out);
void embedding_backward(const Tensor& dout, const int32_t* ids, int64_t row_begin,
                        const Tensor& dtable);

}  // namespace vt::ops
