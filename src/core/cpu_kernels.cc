// CPU reference kernels declared in cpu_kernels.h, except attention (cpu_attention.cc):
// GEMM through OpenBLAS, RMSNorm, RoPE, relu^2, vocab-sliced soft-capped cross-entropy and the
// row-sharded embedding gather / scatter-add. All kernels are deterministic: OpenMP splits
// independent rows (or column chunks), every output element is written by exactly one thread,
// and every reduction runs in a fixed order (accumulated in double for float inputs).
#include "core/cpu_kernels.h"
#include "core/cpu_simd.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"

namespace vt::cpu {
namespace {

// Below this many elements a kernel runs on the calling thread (OpenMP start-up costs more).
constexpr int64_t kParallelMin = 1 << 14;

inline CBLAS_TRANSPOSE blas_trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

inline void blas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), M, N, K, alpha, A, lda, B, ldb, beta,
              C, ldc);
}
inline void blas_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A,
                      int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), M, N, K, alpha, A, lda, B, ldb, beta,
              C, ldc);
}

inline bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// GEMM

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  VT_CHECK(fits_int(M) && fits_int(N) && fits_int(K) && fits_int(lda) && fits_int(ldb) &&
           fits_int(ldc));
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta * C; BLAS implementations disagree on this corner
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  VT_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K));
  VT_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N));
  VT_CHECK(ldc >= std::max<int64_t>(1, N));
  blas_gemm(trans_a, trans_b, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
            int(ldc));
}

// ---------------------------------------------------------------------------------------------
// RMSNorm (no weight)

template <class T>
void rmsnorm_forward(const T* x, T* y, T* rstd, int64_t rows, int64_t C, T scale, double eps) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * double(xr[c]);
    const double rs = 1.0 / std::sqrt(ss / double(C) + eps);
    rstd[r] = T(rs);
    const T f = T(double(scale) * rs);
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * f;
  }
}

// a + b as a bf16 tensor stores it (round_bf16) or exactly.
template <class T>
inline T rounded_sum(T a, T b, bool round_bf16) {
  const T s = a + b;
  return round_bf16 ? T(round_to_bf16(float(s))) : s;
}

template <class T>
void rmsnorm_backward(const T* x, const T* rstd, const T* dy, T* dx, int64_t rows, int64_t C,
                      T scale, bool accumulate, const T* dy2, bool round_bf16) {
  if (dy2 != nullptr) {
    // g = dy + dy2, formed per row into a row buffer (never a tensor), then as below.
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const T *dyr = dy + r * C, *dy2r = dy2 + r * C;
      std::vector<T> g(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) g[c] = rounded_sum(dyr[c], dy2r[c], round_bf16);
      rmsnorm_backward<T>(x + r * C, rstd + r, g.data(), dx + r * C, 1, C, scale, accumulate);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    const T* dyr = dy + r * C;
    T* dxr = dx + r * C;
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += double(dyr[c]) * double(xr[c]);
    const double rs = double(rstd[r]);
    const T a = T(double(scale) * rs);
    const T b = T(rs * rs * dot / double(C));
    if (accumulate) {
      for (int64_t c = 0; c < C; ++c) dxr[c] += a * (dyr[c] - xr[c] * b);
    } else {
      for (int64_t c = 0; c < C; ++c) dxr[c] = a * (dyr[c] - xr[c] * b);
    }
  }
}

template <class T>
void add_rmsnorm_forward(T* x, const T* delta, T* keep, T* y, T* rstd, int64_t rows, int64_t C,
                         T scale, double eps, bool round_bf16) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    T* xr = x + r * C;
    const T* dr = delta + r * C;
    for (int64_t c = 0; c < C; ++c) xr[c] = rounded_sum(xr[c], dr[c], round_bf16);
    if (keep != nullptr) std::memcpy(keep + r * C, xr, sizeof(T) * size_t(C));
    rmsnorm_forward<T>(xr, y + r * C, rstd + r, 1, C, scale, eps);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE (rotate-half pairing)

namespace {

// cos / sin tables (Tn, hd/2), angles computed in double.
template <class T>
void rope_tables(int64_t Tn, int64_t hd, double base, int64_t pos_offset, std::vector<T>& cs,
                 std::vector<T>& sn) {
  const int64_t half = hd / 2;
  std::vector<double> inv_freq(half);
  for (int64_t j = 0; j < half; ++j) inv_freq[j] = std::pow(base, -2.0 * double(j) / double(hd));
  cs.resize(Tn * half);
  sn.resize(Tn * half);
  for (int64_t t = 0; t < Tn; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      const double a = double(t + pos_offset) * inv_freq[j];
      cs[t * half + j] = T(std::cos(a));
      sn[t * half + j] = T(std::sin(a));
    }
  }
}

// sign = +1: forward rotation; sign = -1: the transpose (inverse rotation).
template <class T>
void rope_apply(const T* x, T* y, int64_t B, int64_t Tn, int64_t heads, int64_t hd, double base,
                int64_t pos_offset, T sign) {
  VT_CHECK_MSG(hd % 2 == 0, "rope needs an even head dim, got " << hd);
  const int64_t half = hd / 2;
  std::vector<T> cs, sn;
  rope_tables(Tn, hd, base, pos_offset, cs, sn);
  const int64_t rows = B * Tn;
#pragma omp parallel for schedule(static) if (rows * heads * hd >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % Tn;
    const T* c = cs.data() + t * half;
    const T* s = sn.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      const T* xh = x + (r * heads + h) * hd;
      T* yh = y + (r * heads + h) * hd;
      for (int64_t j = 0; j < half; ++j) {
        const T a = xh[j], b = xh[j + half], sj = sign * s[j];
        yh[j] = a * c[j] - b * sj;
        yh[j + half] = b * c[j] + a * sj;
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(const T* x, T* y, int64_t B, int64_t Tn, int64_t heads, int64_t hd, double base,
                  int64_t pos_offset) {
  rope_apply(x, y, B, Tn, heads, hd, base, pos_offset, T(1));
}

template <class T>
void rope_backward(const T* dy, T* dx, int64_t B, int64_t Tn, int64_t heads, int64_t hd,
                   double base, int64_t pos_offset) {
  rope_apply(dy, dx, B, Tn, heads, hd, base, pos_offset, T(-1));
}

// The fused RoPE + QK-norm: one (b, t, head) vector at a time, its sum of squares taken from x
// (in double, as rmsnorm_forward), the rotation and the scaling in one write; the backward forms
// g = R^T dy twice (for the dot product, then for dx) rather than keeping a copy, so that dx may
// alias dy (each pair of dy is read before its pair of dx is written).
template <class T>
void rope_rmsnorm_forward(const T* x, T* y, T* rstd, int64_t B, int64_t Tn, int64_t heads,
                          int64_t hd, double base, T scale, double eps, int64_t pos_offset) {
  VT_CHECK_MSG(hd % 2 == 0 && hd >= 2, "rope_rmsnorm needs an even head dim, got " << hd);
  const int64_t half = hd / 2;
  std::vector<T> cs, sn;
  rope_tables(Tn, hd, base, pos_offset, cs, sn);
  const int64_t rows = B * Tn;
#pragma omp parallel for schedule(static) if (rows * heads * hd >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % Tn;
    const T* c = cs.data() + t * half;
    const T* s = sn.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = r * heads + h;
      const T* xh = x + i * hd;
      T* yh = y + i * hd;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < hd; ++j) ss += double(xh[j]) * double(xh[j]);
      const double rs = 1.0 / std::sqrt(ss / double(hd) + eps);
      rstd[i] = T(rs);
      const T f = T(double(scale) * rs);
      for (int64_t j = 0; j < half; ++j) {
        const T a = xh[j], b = xh[j + half];
        yh[j] = (a * c[j] - b * s[j]) * f;
        yh[j + half] = (b * c[j] + a * s[j]) * f;
      }
    }
  }
}

template <class T>
void rope_rmsnorm_backward(const T* x, const T* rstd, const T* dy, T* dx, int64_t B, int64_t Tn,
                           int64_t heads, int64_t hd, double base, T scale, int64_t pos_offset) {
  VT_CHECK_MSG(hd % 2 == 0 && hd >= 2, "rope_rmsnorm_backward needs an even head dim, got " << hd);
  const int64_t half = hd / 2;
  std::vector<T> cs, sn;
  rope_tables(Tn, hd, base, pos_offset, cs, sn);
  const int64_t rows = B * Tn;
#pragma omp parallel for schedule(static) if (rows * heads * hd >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % Tn;
    const T* c = cs.data() + t * half;
    const T* s = sn.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = r * heads + h;
      const T* xh = x + i * hd;
      const T* dyh = dy + i * hd;
      T* dxh = dx + i * hd;
      // g = R^T dy: g[j] = dy[j] cos + dy[j+half] sin, g[j+half] = dy[j+half] cos - dy[j] sin.
      double dot = 0;
      for (int64_t j = 0; j < half; ++j) {
        const T ga = dyh[j] * c[j] + dyh[j + half] * s[j];
        const T gb = dyh[j + half] * c[j] - dyh[j] * s[j];
        dot += double(ga) * double(xh[j]) + double(gb) * double(xh[j + half]);
      }
      const double rs = double(rstd[i]);
      const T a = T(double(scale) * rs);
      const T b = T(rs * rs * dot / double(hd));
      for (int64_t j = 0; j < half; ++j) {
        const T ga = dyh[j] * c[j] + dyh[j + half] * s[j];
        const T gb = dyh[j + half] * c[j] - dyh[j] * s[j];
        const T xa = xh[j], xb = xh[j + half];
        dxh[j] = a * (ga - xa * b);
        dxh[j + half] = a * (gb - xb * b);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// relu^2

template <class T>
void relu2_forward(const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T r = x[i] < T(0) ? T(0) : x[i];  // NaN passes
    y[i] = r * r;
  }
}

template <class T>
void relu2_backward(const T* x, const T* dy, T* dx, int64_t n, bool accumulate) {
  if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T r = x[i] < T(0) ? T(0) : x[i];  // NaN passes
      dx[i] += T(2) * r * dy[i];
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T r = x[i] < T(0) ? T(0) : x[i];  // NaN passes
      dx[i] = T(2) * r * dy[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// relu

template <class T>
void relu_forward(const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];  // NaN passes
}

template <class T>
void relu_backward(const T* x, const T* dy, T* dx, int64_t n, bool accumulate) {
  // The derivative at 0 is taken as 0 (as relu^2's); a NaN x passes its NaN on.
  if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] += x[i] > T(0) ? dy[i] : (x[i] == x[i] ? T(0) : x[i]);
  } else {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : (x[i] == x[i] ? T(0) : x[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Soft-capped, vocabulary-sliced cross-entropy

template <class T>
void xent_partial_forward(const T* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, T cap, T* row_max,
                          T* row_sumexp, T* target_z) {
  VT_CHECK(n_valid >= 0 && n_valid <= ld);
  VT_CHECK(cap > T(0));
  const T inv_cap = T(1) / cap;
#pragma omp parallel if (N * n_valid >= kParallelMin)
  {
    std::vector<T> z(n_valid);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* l = logits + n * ld;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < n_valid; ++c) {
        z[c] = cap * std::tanh(l[c] * inv_cap);
        mx = std::max(mx, z[c]);
      }
      double sum = 0;
      for (int64_t c = 0; c < n_valid; ++c) sum += double(std::exp(z[c] - mx));
      row_max[n] = mx;
      row_sumexp[n] = T(sum);
      const int64_t tc = int64_t(targets[n]) - col_offset;
      target_z[n] = (tc >= 0 && tc < n_valid) ? z[tc] : T(0);
    }
  }
}

template <class T>
void xent_backward(const T* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
                   const int32_t* targets, T cap, const T* lse, const T* dloss, T* dlogits) {
  VT_CHECK(n_valid >= 0 && n_valid <= ld);
  VT_CHECK(cap > T(0));
  const T inv_cap = T(1) / cap;
#pragma omp parallel for schedule(static) if (N * n_valid >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * ld;
    T* d = dlogits + n * ld;
    const T g = dloss[n], m = lse[n];
    for (int64_t c = 0; c < n_valid; ++c) {
      const T th = std::tanh(l[c] * inv_cap);
      const T p = std::exp(cap * th - m);
      d[c] = g * p * (T(1) - th * th);
    }
    const int64_t tc = int64_t(targets[n]) - col_offset;
    if (tc >= 0 && tc < n_valid) {
      const T th = std::tanh(l[tc] * inv_cap);
      d[tc] -= g * (T(1) - th * th);
    }
    for (int64_t c = n_valid; c < ld; ++c) d[c] = T(0);
  }
}

// One row at a time: th = tanh(logit / cap) and z = cap * th of the row kept in scratch rows
// (z formed and rounded as xent_partial_forward forms it: a product fused into the next
// subtraction would round differently), so the gradient pass needs nothing more from the
// logits and may overwrite them.
template <class T>
void xent_loss_grad(const T* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
                    const int32_t* targets, T cap, T grad_scale, T* lse, T* loss, T* dlogits) {
  VT_CHECK(n_valid >= 0 && n_valid <= ld);
  VT_CHECK(cap > T(0));
  const T inv_cap = T(1) / cap;
#pragma omp parallel if (N * n_valid >= kParallelMin)
  {
    std::vector<T> th(n_valid), z(n_valid);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* l = logits + n * ld;
      T* d = dlogits + n * ld;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < n_valid; ++c) {
        th[c] = std::tanh(l[c] * inv_cap);
        z[c] = cap * std::tanh(l[c] * inv_cap);
        mx = std::max(mx, z[c]);
      }
      double sum = 0;
      for (int64_t c = 0; c < n_valid; ++c) sum += double(std::exp(z[c] - mx));
      const int64_t tc = int64_t(targets[n]) - col_offset;
      const bool local = tc >= 0 && tc < n_valid;
      const T m = mx + std::log(T(sum));
      lse[n] = m;
      loss[n] = m - (local ? z[tc] : T(0));
      const T g = grad_scale;
      for (int64_t c = 0; c < n_valid; ++c)
        d[c] = g * std::exp(cap * th[c] - m) * (T(1) - th[c] * th[c]);
      if (local) d[tc] -= g * (T(1) - th[tc] * th[tc]);
      for (int64_t c = n_valid; c < ld; ++c) d[c] = T(0);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Row-sharded embedding

template <class T>
void embedding_forward(const T* table, int64_t row_begin, int64_t rows, int64_t C,
                       const int32_t* ids, int64_t N, T* out) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = int64_t(ids[n]) - row_begin;
    if (r >= 0 && r < rows) {
      std::memcpy(out + n * C, table + r * C, sizeof(T) * C);
    } else {
      std::fill(out + n * C, out + (n + 1) * C, T(0));
    }
  }
}

// Threads own disjoint column chunks and each walks the ids in order n = 0..N-1, so every
// element of dtable receives its contributions in the same order whatever the thread count.
template <class T>
void embedding_backward(const T* dout, const int32_t* ids, int64_t N, int64_t row_begin,
                        int64_t rows, int64_t C, T* dtable) {
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin && chunks > 1)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = int64_t(ids[n]) - row_begin;
      if (r < 0 || r >= rows) continue;
      T* dst = dtable + r * C;
      const T* src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// float cross-entropy: the same formulas with vectorized tanh/exp (cpu_simd.h). The soft cap
// puts a tanh and an exp on every logit of the vocabulary, which dominates small models.

// sum_c exp(z[c] - mx) over a row's soft-capped logits: float lanes over blocks of 64 columns,
// the blocks in double (the order both the partial forward and the fused loss end use, so their
// sums are the same bits).
inline double sum_exp_shifted(const float* z, int64_t n_valid, float mx) {
  using namespace simd;
  double sum = 0;
  int64_t c = 0;
  while (c + kLanes <= n_valid) {
    f8 acc = splat(0.0f);
    const int64_t end = std::min(n_valid - (n_valid - c) % kLanes, c + 64);
    for (; c < end; c += kLanes) acc += simd::exp(load(z + c) - mx);
    sum += hsum(acc);
  }
  for (; c < n_valid; ++c) sum += std::exp(double(z[c]) - mx);
  return sum;
}

template <>
void xent_partial_forward<float>(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                                 int64_t col_offset, const int32_t* targets, float cap,
                                 float* row_max, float* row_sumexp, float* target_z) {
  using namespace simd;
  VT_CHECK(n_valid >= 0 && n_valid <= ld);
  VT_CHECK(cap > 0.0f);
  const float inv_cap = 1.0f / cap;
#pragma omp parallel if (N * n_valid >= kParallelMin)
  {
    std::vector<float> z(n_valid + kLanes);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* l = logits + n * ld;
      f8 vmx = splat(-std::numeric_limits<float>::infinity());
      int64_t c = 0;
      for (; c + kLanes <= n_valid; c += kLanes) {
        const f8 v = simd::tanh(load(l + c) * inv_cap) * cap;
        store(z.data() + c, v);
        vmx = vmax(vmx, v);
      }
      float mx = hmax(vmx);
      for (; c < n_valid; ++c) {
        z[c] = cap * std::tanh(l[c] * inv_cap);
        mx = std::max(mx, z[c]);
      }
      const double sum = sum_exp_shifted(z.data(), n_valid, mx);
      row_max[n] = mx;
      row_sumexp[n] = float(sum);
      const int64_t tc = int64_t(targets[n]) - col_offset;
      target_z[n] = (tc >= 0 && tc < n_valid) ? z[tc] : 0.0f;
    }
  }
}

template <>
void xent_backward<float>(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                          const float* dloss, float* dlogits) {
  using namespace simd;
  VT_CHECK(n_valid >= 0 && n_valid <= ld);
  VT_CHECK(cap > 0.0f);
  const float inv_cap = 1.0f / cap;
#pragma omp parallel for schedule(static) if (N * n_valid >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * ld;
    float* d = dlogits + n * ld;
    const float g = dloss[n], m = lse[n];
    int64_t c = 0;
    for (; c + kLanes <= n_valid; c += kLanes) {
      const f8 th = simd::tanh(load(l + c) * inv_cap);
      const f8 p = simd::exp(th * cap - m);
      store(d + c, p * (1.0f - th * th) * g);
    }
    for (; c < n_valid; ++c) {
      const float th = std::tanh(l[c] * inv_cap);
      d[c] = g * std::exp(cap * th - m) * (1.0f - th * th);
    }
    const int64_t tc = int64_t(targets[n]) - col_offset;
    if (tc >= 0 && tc < n_valid) {
      const float th = std::tanh(l[tc] * inv_cap);
      d[tc] -= g * (1.0f - th * th);
    }
    for (c = n_valid; c < ld; ++c) d[c] = 0.0f;
  }
}

// The float kernel repeats xent_partial_forward<float>'s and xent_backward<float>'s arithmetic
// (same lanes, same blocks of the sum, z and th kept as each of them forms its own) so that it
// equals them bit for bit; the target's tanh is taken scalar, as xent_backward takes it, before
// the row is overwritten.
template <>
void xent_loss_grad<float>(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                           int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                           float* lse, float* loss, float* dlogits) {
  using namespace simd;
  VT_CHECK(n_valid >= 0 && n_valid <= ld);
  VT_CHECK(cap > 0.0f);
  const float inv_cap = 1.0f / cap;
#pragma omp parallel if (N * n_valid >= kParallelMin)
  {
    std::vector<float> th(n_valid + kLanes), z(n_valid + kLanes);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* l = logits + n * ld;
      float* d = dlogits + n * ld;
      f8 vmx = splat(-std::numeric_limits<float>::infinity());
      int64_t c = 0;
      for (; c + kLanes <= n_valid; c += kLanes) {
        const f8 t = simd::tanh(load(l + c) * inv_cap);
        const f8 v = t * cap;
        store(th.data() + c, t);
        store(z.data() + c, v);
        vmx = vmax(vmx, v);
      }
      float mx = hmax(vmx);
      for (; c < n_valid; ++c) {
        th[c] = std::tanh(l[c] * inv_cap);
        z[c] = cap * std::tanh(l[c] * inv_cap);
        mx = std::max(mx, z[c]);
      }
      const double sum = sum_exp_shifted(z.data(), n_valid, mx);
      const int64_t tc = int64_t(targets[n]) - col_offset;
      const bool local = tc >= 0 && tc < n_valid;
      const float target_z = local ? z[tc] : 0.0f;
      const float th_target = local ? std::tanh(l[tc] * inv_cap) : 0.0f;
      const float m = mx + std::log(float(sum));
      lse[n] = m;
      loss[n] = m - target_z;
      const float g = grad_scale;
      for (c = 0; c + kLanes <= n_valid; c += kLanes) {
        const f8 t = load(th.data() + c);
        const f8 p = simd::exp(t * cap - m);
        store(d + c, p * (1.0f - t * t) * g);
      }
      for (; c < n_valid; ++c) d[c] = g * std::exp(cap * th[c] - m) * (1.0f - th[c] * th[c]);
      if (local) d[tc] -= g * (1.0f - th_target * th_target);
      for (c = n_valid; c < ld; ++c) d[c] = 0.0f;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Explicit instantiations

#define VT_INSTANTIATE_CPU_KERNELS(T)                                                            \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,   \
                        int64_t, T, T*, int64_t);                                                \
  template void rmsnorm_forward<T>(const T*, T*, T*, int64_t, int64_t, T, double);               \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, T, bool,  \
                                    const T*, bool);                                             \
  template void add_rmsnorm_forward<T>(T*, const T*, T*, T*, T*, int64_t, int64_t, T, double,    \
                                       bool);                                                    \
  template void rope_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, double,        \
                                int64_t);                                                        \
  template void rope_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, double,       \
                                 int64_t);                                                       \
  template void rope_rmsnorm_forward<T>(const T*, T*, T*, int64_t, int64_t, int64_t, int64_t,   \
                                        double, T, double, int64_t);                             \
  template void rope_rmsnorm_backward<T>(const T*, const T*, const T*, T*, int64_t, int64_t,     \
                                         int64_t, int64_t, double, T, int64_t);                  \
  template void relu2_forward<T>(const T*, T*, int64_t);                                         \
  template void relu2_backward<T>(const T*, const T*, T*, int64_t, bool);                        \
  template void relu_forward<T>(const T*, T*, int64_t);                                          \
  template void relu_backward<T>(const T*, const T*, T*, int64_t, bool);                         \
  template void xent_partial_forward<T>(const T*, int64_t, int64_t, int64_t, int64_t,            \
                                        const int32_t*, T, T*, T*, T*);                          \
  template void xent_backward<T>(const T*, int64_t, int64_t, int64_t, int64_t, const int32_t*,  \
                                 T, const T*, const T*, T*);                                     \
  template void xent_loss_grad<T>(const T*, int64_t, int64_t, int64_t, int64_t, const int32_t*, \
                                  T, T, T*, T*, T*);                                             \
  template void embedding_forward<T>(const T*, int64_t, int64_t, int64_t, const int32_t*,        \
                                     int64_t, T*);                                               \
  template void embedding_backward<T>(const T*, const int32_t*, int64_t, int64_t, int64_t,       \
                                      int64_t, T*);

VT_INSTANTIATE_CPU_KERNELS(float)
VT_INSTANTIATE_CPU_KERNELS(double)
#undef VT_INSTANTIATE_CPU_KERNELS

}  // namespace vt::cpu
