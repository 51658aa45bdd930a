// CPU causal sliding-window GQA attention (forward + backward), flash-style blocked.
//
// For every (batch, query head) the queries are cut into blocks of kBlock rows. A block
// [t0, t1) only visits the keys any of its rows can see, s in [max(0, t0 - W + 1), t1), so the
// scratch is kBlock x (kBlock + W - 1) per thread and never T x T for windowed layers. Scores and
// products are GEMMs on strided views of q/k/v (no copies); the mask is applied per row by
// clamping the softmax to that row's visible range and zeroing the rest.
//
// Backward recomputes P = exp(S - lse) and uses D = rowsum(dO * O):
//   dS = P * (dP - D) * scale with dP = dO V^T;  dQ = dS K;  dK += dS^T Q;  dV += P^T dO.
// It is parallel over (batch, KV head) and loops over the query heads of that group inside,
// so the GQA accumulation into dK/dV has one owner thread and a fixed order: results are
// bitwise identical whatever the thread count. (With B * Hkv smaller than the thread count
// some threads idle; training shapes have enough (batch, head) pairs.)
//
// Threading choice: OpenMP over independent work items, each calling single-threaded BLAS.
// OpenBLAS's own threads inside an OpenMP region would oversubscribe the cores (and the
// pthreads build serializes concurrent callers), so BlasSerialGuard sets the pthreads OpenBLAS
// to one thread for the duration of the call and restores it afterwards (the blocks' GEMMs are
// too small to gain from BLAS threads, and serial BLAS keeps results independent of the thread
// count). The OpenMP build of OpenBLAS already runs serially inside a parallel region.
// Note the setting is process-wide: no other thread should call BLAS during attention.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/cpu_simd.h"

namespace vt::cpu {
namespace {

constexpr int64_t kBlock = 64;

class BlasSerialGuard {
 public:
  BlasSerialGuard() {
    if (omp_in_parallel()) return;
    if (openblas_get_parallel() != 1) return;  // 0: sequential build, 2: OpenMP build
    const int n = openblas_get_num_threads();
    if (n > 1) {
      saved_ = n;
      openblas_set_num_threads(1);
    }
  }
  ~BlasSerialGuard() {
    if (saved_ > 1) openblas_set_num_threads(saved_);
  }
  BlasSerialGuard(const BlasSerialGuard&) = delete;
  BlasSerialGuard& operator=(const BlasSerialGuard&) = delete;

 private:
  int saved_ = 0;
};

void check_shape(const AttnShape& s) {
  VT_CHECK(s.B >= 1 && s.T >= 1 && s.H >= 1 && s.Hkv >= 1 && s.hd >= 1);
  VT_CHECK_MSG(s.H % s.Hkv == 0, "H=" << s.H << " is not a multiple of Hkv=" << s.Hkv);
  VT_CHECK_MSG(s.window >= 1, "attention window must be >= 1, got " << s.window);
}

// Geometry of one query block: rows [t0, t1), keys [s0, t1) (span columns of scratch).
struct Block {
  int64_t t0, t1, s0, span;
  Block(int64_t blk, int64_t T, int64_t W) {
    t0 = blk * kBlock;
    t1 = std::min(T, t0 + kBlock);
    s0 = std::max<int64_t>(0, t0 - W + 1);
    span = t1 - s0;
  }
  // Visible columns [lo, hi] (inclusive, relative to s0) of query row t.
  int64_t lo(int64_t t, int64_t W) const { return std::max<int64_t>(0, t - W + 1) - s0; }
  int64_t hi(int64_t t) const { return t - s0; }
};

// Row kernels of the softmax: max, x = exp(x - shift) (+ its sum). The double versions are
// plain loops with std::exp (reference precision, used by the float64 tests). The float
// versions use GCC/Clang vector extensions (the compiler will not vectorize an exp loop by
// itself): a Cephes-style range reduction + degree-6 polynomial, about 1 ulp, inputs below -87
// clamped (exp(-87) ~ 1.6e-38). Sums and maxima use two 4-lane accumulators combined in a fixed
// order, so results are deterministic.
template <class T>
T row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}
template <class T>
T exp_shift_sum(T* x, int64_t n, T shift) {
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (x[j] = std::exp(x[j] - shift));
  return sum;
}

using v4f = float __attribute__((vector_size(16)));
using v4i = int32_t __attribute__((vector_size(16)));
inline v4f splat(float a) { return v4f{a, a, a, a}; }
inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, v4f v) { std::memcpy(p, &v, sizeof v); }

inline v4f exp4(v4f x) { return simd::vexp<v4f, v4i>(x); }

template <>
float row_max<float>(const float* x, int64_t n) {
  v4f a = splat(-std::numeric_limits<float>::infinity()), b = a;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v4f u = load4(x + j), w = load4(x + j + 4);
    a = u > a ? u : a;
    b = w > b ? w : b;
  }
  a = b > a ? b : a;
  float m = std::max(std::max(a[0], a[1]), std::max(a[2], a[3]));
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

template <>
float exp_shift_sum<float>(float* x, int64_t n, float shift) {
  v4f a = splat(0.0f), b = a;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v4f u = exp4(load4(x + j) - shift), w = exp4(load4(x + j + 4) - shift);
    store4(x + j, u);
    store4(x + j + 4, w);
    a += u;
    b += w;
  }
  a += b;
  float sum = (a[0] + a[1]) + (a[2] + a[3]);
  for (; j < n; j += 4) {  // tail: up to 7 values, padded to whole vectors
    const int64_t m = std::min<int64_t>(4, n - j);
    v4f u = splat(0.0f);
    std::memcpy(&u, x + j, sizeof(float) * m);
    u = exp4(u - shift);
    std::memcpy(x + j, &u, sizeof(float) * m);
    for (int64_t l = 0; l < m; ++l) sum += u[l];
  }
  return sum;
}

// Zero the columns of a scratch row outside [lo, hi].
template <class T>
inline void zero_outside(T* row, int64_t lo, int64_t hi, int64_t span) {
  if (lo > 0) std::memset(row, 0, sizeof(T) * lo);
  if (hi + 1 < span) std::memset(row + hi + 1, 0, sizeof(T) * (span - hi - 1));
}

}  // namespace

// Adds bias[t][s0 + j] to the visible columns [lo, hi] of the scratch row of query t.
template <class T>
inline void add_bias(T* row, const T* bias, int64_t Tn, int64_t t, int64_t s0, int64_t lo,
                     int64_t hi) {
  if (!bias) return;
  const T* b = bias + t * Tn + s0;
  for (int64_t j = lo; j <= hi; ++j) row[j] += b[j];
}

template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* out, T* lse, const AttnShape& s,
                       T scale, const T* bias) {
  check_shape(s);
  const int64_t B = s.B, Tn = s.T, H = s.H, Hkv = s.Hkv, hd = s.hd;
  const int64_t W = std::min(s.window, Tn);  // any window >= T is full causal
  const int64_t group = H / Hkv, ldq = H * hd, ldk = Hkv * hd;
  const int64_t nblk = (Tn + kBlock - 1) / kBlock;
  const int64_t max_span = std::min(Tn, kBlock + W - 1);
  const int64_t items = B * H * nblk;
  BlasSerialGuard guard;
#pragma omp parallel if (items > 1)
  {
    std::vector<T> S(kBlock * max_span);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      // Largest blocks first (they see the most keys) to balance the dynamic schedule.
      const int64_t blk = nblk - 1 - item / (B * H);
      const int64_t b = (item % (B * H)) / H, h = item % H, g = h / group;
      const Block bl(blk, Tn, W);
      const int64_t bq = bl.t1 - bl.t0, span = bl.span;
      const T* qb = q + ((b * Tn + bl.t0) * H + h) * hd;
      const T* kb = k + ((b * Tn + bl.s0) * Hkv + g) * hd;
      const T* vb = v + ((b * Tn + bl.s0) * Hkv + g) * hd;
      T* P = S.data();
      gemm<T>(false, true, bq, span, hd, scale, qb, ldq, kb, ldk, T(0), P, span);
      T* lse_bh = lse + (b * H + h) * Tn;
      for (int64_t i = 0; i < bq; ++i) {
        const int64_t t = bl.t0 + i, lo = bl.lo(t, W), hi = bl.hi(t);
        T* row = P + i * span;
        add_bias(row, bias, Tn, t, bl.s0, lo, hi);
        const T mx = row_max(row + lo, hi - lo + 1);
        const T sum = exp_shift_sum(row + lo, hi - lo + 1, mx);
        const T inv = T(1) / sum;
#pragma omp simd
        for (int64_t j = lo; j <= hi; ++j) row[j] *= inv;
        zero_outside(row, lo, hi, span);
        lse_bh[t] = mx + std::log(sum);
      }
      gemm<T>(false, false, bq, hd, span, T(1), P, span, vb, ldk, T(0),
              out + ((b * Tn + bl.t0) * H + h) * hd, ldq);
    }
  }
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* dout, T* dq, T* dk, T* dv, const AttnShape& s, T scale,
                        const T* bias) {
  check_shape(s);
  const int64_t B = s.B, Tn = s.T, H = s.H, Hkv = s.Hkv, hd = s.hd;
  const int64_t W = std::min(s.window, Tn);  // any window >= T is full causal
  const int64_t group = H / Hkv, ldq = H * hd, ldk = Hkv * hd;
  const int64_t nblk = (Tn + kBlock - 1) / kBlock;
  const int64_t max_span = std::min(Tn, kBlock + W - 1);
  const int64_t items = B * Hkv;
  BlasSerialGuard guard;
#pragma omp parallel if (items > 1)
  {
    std::vector<T> Pbuf(kBlock * max_span), dSbuf(kBlock * max_span), D(kBlock);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / Hkv, g = item % Hkv;
      for (int64_t t = 0; t < Tn; ++t) {
        std::memset(dk + ((b * Tn + t) * Hkv + g) * hd, 0, sizeof(T) * hd);
        std::memset(dv + ((b * Tn + t) * Hkv + g) * hd, 0, sizeof(T) * hd);
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const T* lse_bh = lse + (b * H + h) * Tn;
        for (int64_t blk = 0; blk < nblk; ++blk) {
          const Block bl(blk, Tn, W);
          const int64_t bq = bl.t1 - bl.t0, span = bl.span;
          const int64_t qoff = ((b * Tn + bl.t0) * H + h) * hd;
          const int64_t koff = ((b * Tn + bl.s0) * Hkv + g) * hd;
          T* P = Pbuf.data();
          T* dS = dSbuf.data();
          // P = exp(scale * Q K^T - lse) on the visible range, 0 elsewhere.
          gemm<T>(false, true, bq, span, hd, scale, q + qoff, ldq, k + koff, ldk, T(0), P, span);
          for (int64_t i = 0; i < bq; ++i) {
            const int64_t t = bl.t0 + i, lo = bl.lo(t, W), hi = bl.hi(t);
            T* row = P + i * span;
            add_bias(row, bias, Tn, t, bl.s0, lo, hi);
            const T m = lse_bh[t];
            exp_shift_sum(row + lo, hi - lo + 1, m);
            zero_outside(row, lo, hi, span);
            const T* o = out + qoff + i * ldq;
            const T* d_o = dout + qoff + i * ldq;
            T acc = 0;
            for (int64_t c = 0; c < hd; ++c) acc += o[c] * d_o[c];
            D[i] = acc;
          }
          // dP = dO V^T, then dS = P * (dP - D) * scale in place.
          gemm<T>(false, true, bq, span, hd, T(1), dout + qoff, ldq, v + koff, ldk, T(0), dS,
                  span);
          for (int64_t i = 0; i < bq; ++i) {
            const int64_t t = bl.t0 + i, lo = bl.lo(t, W), hi = bl.hi(t);
            const T* prow = P + i * span;
            T* row = dS + i * span;
            const T di = D[i];
#pragma omp simd
            for (int64_t j = lo; j <= hi; ++j) row[j] = prow[j] * (row[j] - di) * scale;
            zero_outside(row, lo, hi, span);
          }
          gemm<T>(false, false, bq, hd, span, T(1), dS, span, k + koff, ldk, T(0), dq + qoff,
                  ldq);
          gemm<T>(true, false, span, hd, bq, T(1), dS, span, q + qoff, ldq, T(1), dk + koff,
                  ldk);
          gemm<T>(true, false, span, hd, bq, T(1), P, span, dout + qoff, ldq, T(1), dv + koff,
                  ldk);
        }
      }
    }
  }
}

template void attention_forward<float>(const float*, const float*, const float*, float*, float*,
                                       const AttnShape&, float, const float*);
template void attention_forward<double>(const double*, const double*, const double*, double*,
                                        double*, const AttnShape&, double, const double*);
template void attention_backward<float>(const float*, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*,
                                        const AttnShape&, float, const float*);
template void attention_backward<double>(const double*, const double*, const double*,
                                         const double*, const double*, const double*, double*,
                                         double*, double*, const AttnShape&, double,
                                         const double*);

}  // namespace vt::cpu
