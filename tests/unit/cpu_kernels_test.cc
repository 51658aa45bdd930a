// Tests of the CPU kernels other than attention (cpu_attention_test.cc): each forward against a
// naive formula written here (float64), float against double, and each backward against
// central finite differences in float64 of a random objective sum(w * f(x)).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "core/cpu_kernels.h"
#include "kernel_test_util.h"

namespace vt::cpu {
namespace {

using test::cast;
using test::check_fd;
using test::dot;
using test::expect_close;
using test::randn;
using test::Vec;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ------------------------------------------------------------------------------------------
// GEMM

Vec naive_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const Vec& A,
               int64_t lda, const Vec& B, int64_t ldb, double beta, Vec C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        const double a = ta ? A[p * lda + i] : A[i * lda + p];
        const double b = tb ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      C[i * ldc + j] = alpha * acc + (beta == 0 ? 0.0 : beta * C[i * ldc + j]);
    }
  }
  return C;
}

TEST(KernelGemm, AllTransposesAndLeadingDims) {
  const int64_t M = 7, N = 11, K = 5;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (double beta : {0.0, 0.3}) {
        const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 4;
        const Vec A = randn((ta ? K : M) * lda, 1), B = randn((tb ? N : K) * ldb, 2);
        // With beta = 0 the input C must not matter, even NaN.
        const Vec C0 = beta == 0 ? Vec(M * ldc, kNaN) : randn(M * ldc, 3);
        Vec ref = naive_gemm(ta, tb, M, N, K, 0.7, A, lda, B, ldb, beta,
                             beta == 0 ? Vec(M * ldc, 0.0) : C0, ldc);
        Vec Cd = C0;
        gemm<double>(ta, tb, M, N, K, 0.7, A.data(), lda, B.data(), ldb, beta, Cd.data(), ldc);
        auto Af = cast<float>(A), Bf = cast<float>(B), Cf = cast<float>(C0);
        gemm<float>(ta, tb, M, N, K, 0.7f, Af.data(), lda, Bf.data(), ldb, float(beta), Cf.data(),
                    ldc);
        // Padding columns of C (j >= N) must be untouched.
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = N; j < ldc; ++j) {
            ref[i * ldc + j] = beta == 0 ? 0.0 : C0[i * ldc + j];
            if (beta == 0) Cd[i * ldc + j] = Cf[i * ldc + j] = 0;
          }
        const std::string what = "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        expect_close(Cd, ref, 1e-12, what + " double");
        expect_close(Cf, ref, 1e-5, what + " float");
      }
    }
  }
}

TEST(KernelGemm, EmptyInnerDimensionScalesC) {
  Vec C = {1, 2, 3, 4};
  gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.5, C.data(), 2);
  expect_close(C, {0.5, 1, 1.5, 2}, 0, "beta scaling");
  Vec Cn(4, kNaN);
  gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.0, Cn.data(), 2);
  expect_close(Cn, {0, 0, 0, 0}, 0, "beta zero");
}

// ------------------------------------------------------------------------------------------
// RMSNorm

constexpr double kEps = 1e-6;

Vec naive_rmsnorm(const Vec& x, int64_t rows, int64_t C, double scale, Vec* rstd) {
  Vec y(x.size());
  if (rstd) rstd->assign(rows, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    const double rs = 1.0 / std::sqrt(ss / C + kEps);
    if (rstd) (*rstd)[r] = rs;
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = scale * x[r * C + c] * rs;
  }
  return y;
}

TEST(KernelRmsnorm, ForwardMatchesFormula) {
  const int64_t rows = 9, C = 24;
  const double scale = 1.2;
  const Vec x = randn(rows * C, 10, 2.0);
  Vec rstd_ref;
  const Vec y_ref = naive_rmsnorm(x, rows, C, scale, &rstd_ref);
  Vec y(x.size(), kNaN), rstd(rows, kNaN);
  rmsnorm_forward<double>(x.data(), y.data(), rstd.data(), rows, C, scale, kEps);
  expect_close(y, y_ref, 1e-12, "y");
  expect_close(rstd, rstd_ref, 1e-12, "rstd");
  // In place (y aliases x).
  Vec xa = x;
  rmsnorm_forward<double>(xa.data(), xa.data(), rstd.data(), rows, C, scale, kEps);
  expect_close(xa, y_ref, 1e-12, "in place");
  // float
  auto xf = cast<float>(x);
  std::vector<float> yf(x.size()), rf(rows);
  rmsnorm_forward<float>(xf.data(), yf.data(), rf.data(), rows, C, 1.2f, kEps);
  expect_close(yf, y_ref, 1e-6, "float y");
  expect_close(rf, rstd_ref, 1e-6, "float rstd");
}

TEST(KernelRmsnorm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, C = 16;
  const double scale = 1.2;
  Vec x = randn(rows * C, 11);
  const Vec w = randn(rows * C, 12);
  Vec y(x.size()), rstd(rows), dx(x.size(), kNaN);
  rmsnorm_forward<double>(x.data(), y.data(), rstd.data(), rows, C, scale, kEps);
  rmsnorm_backward<double>(x.data(), rstd.data(), w.data(), dx.data(), rows, C, scale, false);
  check_fd(x, [&] { return dot(w, naive_rmsnorm(x, rows, C, scale, nullptr)); }, dx, "dx");

  // accumulate adds onto what is there
  const Vec base = randn(rows * C, 13);
  Vec acc = base;
  rmsnorm_backward<double>(x.data(), rstd.data(), w.data(), acc.data(), rows, C, scale, true);
  Vec want(base.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = base[i] + dx[i];
  expect_close(acc, want, 1e-14, "accumulate");

  // float agrees with double
  auto xf = cast<float>(x), wf = cast<float>(w);
  std::vector<float> yf(x.size()), rf(rows), dxf(x.size());
  rmsnorm_forward<float>(xf.data(), yf.data(), rf.data(), rows, C, 1.2f, kEps);
  rmsnorm_backward<float>(xf.data(), rf.data(), wf.data(), dxf.data(), rows, C, 1.2f, false);
  expect_close(dxf, dx, 1e-5, "float dx");
}

// ------------------------------------------------------------------------------------------
// RoPE

Vec naive_rope(const Vec& x, int64_t B, int64_t Tn, int64_t heads, int64_t hd, double base,
               int64_t off) {
  Vec y(x.size());
  const int64_t half = hd / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t o = ((b * Tn + t) * heads + h) * hd;
        for (int64_t j = 0; j < half; ++j) {
          const double ang = double(t + off) * std::pow(base, -2.0 * j / hd);
          y[o + j] = x[o + j] * std::cos(ang) - x[o + j + half] * std::sin(ang);
          y[o + j + half] = x[o + j + half] * std::cos(ang) + x[o + j] * std::sin(ang);
        }
      }
  return y;
}

TEST(KernelRope, ForwardMatchesFormula) {
  const int64_t B = 2, Tn = 13, heads = 3, hd = 16;
  const double base = 100000;
  const Vec x = randn(B * Tn * heads * hd, 20);
  for (int64_t off : {0, 5}) {
    const Vec ref = naive_rope(x, B, Tn, heads, hd, base, off);
    Vec y(x.size(), kNaN);
    rope_forward<double>(x.data(), y.data(), B, Tn, heads, hd, base, off);
    expect_close(y, ref, 1e-12, "rope off=" + std::to_string(off));
    Vec xa = x;
    rope_forward<double>(xa.data(), xa.data(), B, Tn, heads, hd, base, off);
    expect_close(xa, ref, 1e-12, "in place");
    auto xf = cast<float>(x);
    std::vector<float> yf(x.size());
    rope_forward<float>(xf.data(), yf.data(), B, Tn, heads, hd, base, off);
    expect_close(yf, ref, 1e-6, "float");
  }
}

TEST(KernelRope, BackwardMatchesFiniteDifferencesAndInverts) {
  const int64_t B = 2, Tn = 9, heads = 2, hd = 8, off = 3;
  const double base = 10000;
  Vec x = randn(B * Tn * heads * hd, 21);
  const Vec w = randn(x.size(), 22);
  Vec dx(x.size(), kNaN);
  rope_backward<double>(w.data(), dx.data(), B, Tn, heads, hd, base, off);
  check_fd(x, [&] { return dot(w, naive_rope(x, B, Tn, heads, hd, base, off)); }, dx, "dx");
  // The rotation is orthogonal: backward undoes forward (in place, dx aliasing dy).
  Vec y(x.size());
  rope_forward<double>(x.data(), y.data(), B, Tn, heads, hd, base, off);
  rope_backward<double>(y.data(), y.data(), B, Tn, heads, hd, base, off);
  expect_close(y, x, 1e-13, "inverse");
}

// ------------------------------------------------------------------------------------------
// relu^2

TEST(KernelRelu2, ForwardAndBackward) {
  const int64_t n = 301;
  Vec x = randn(n, 30);
  for (auto& v : x)  // keep away from the kink at 0 so finite differences are valid
    if (std::abs(v) < 1e-3) v = 0.5;
  Vec ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = x[i] > 0 ? x[i] * x[i] : 0;
  Vec y(n, kNaN);
  relu2_forward<double>(x.data(), y.data(), n);
  expect_close(y, ref, 1e-15, "forward");
  auto xf = cast<float>(x);
  std::vector<float> yf(n);
  relu2_forward<float>(xf.data(), yf.data(), n);
  expect_close(yf, ref, 1e-6, "float forward");

  const Vec w = randn(n, 31);
  Vec dx(n, kNaN);
  relu2_backward<double>(x.data(), w.data(), dx.data(), n, false);
  check_fd(x, [&] {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += w[i] * (x[i] > 0 ? x[i] * x[i] : 0);
    return s;
  }, dx, "dx");
  Vec acc = randn(n, 32), want = acc;
  for (int64_t i = 0; i < n; ++i) want[i] += dx[i];
  relu2_backward<double>(x.data(), w.data(), acc.data(), n, true);
  expect_close(acc, want, 1e-15, "accumulate");
}

TEST(KernelRelu, ForwardAndBackward) {
  const int64_t n = 301;
  Vec x = randn(n, 33);
  for (auto& v : x)  // keep away from the kink at 0 so finite differences are valid
    if (std::abs(v) < 1e-3) v = -0.5;
  x[7] = 0.0;  // at the kink: relu(0) = 0, derivative taken as 0
  Vec ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = x[i] > 0 ? x[i] : 0;
  Vec y(n, kNaN);
  relu_forward<double>(x.data(), y.data(), n);
  expect_close(y, ref, 0.0, "forward");
  auto xf = cast<float>(x);
  std::vector<float> yf(n);
  relu_forward<float>(xf.data(), yf.data(), n);
  expect_close(yf, ref, 1e-7, "float forward");

  const Vec w = randn(n, 34);
  Vec dx(n, kNaN);
  relu_backward<double>(x.data(), w.data(), dx.data(), n, false);
  EXPECT_EQ(dx[7], 0.0);
  x[7] = -0.5;  // finite differences away from the kink
  check_fd(x, [&] {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += w[i] * (x[i] > 0 ? x[i] : 0);
    return s;
  }, dx, "dx");
  Vec acc = randn(n, 35), want = acc;
  for (int64_t i = 0; i < n; ++i) want[i] += dx[i];
  relu_backward<double>(x.data(), w.data(), acc.data(), n, true);
  expect_close(acc, want, 1e-15, "accumulate");
  // NaN passes forward and backward.
  const double nan = std::nan(""), one = 1.0;
  double yn = 0, dn = 0;
  relu_forward<double>(&nan, &yn, 1);
  relu_backward<double>(&nan, &one, &dn, 1, false);
  EXPECT_TRUE(std::isnan(yn) && std::isnan(dn));
}

// ------------------------------------------------------------------------------------------
// Cross-entropy

// Naive full-vocabulary loss: loss[n] = logsumexp_c z[n,c] - z[n,target], z = cap*tanh(l/cap)
// over the first V columns of rows of width ld.
Vec naive_xent(const Vec& logits, int64_t N, int64_t ld, int64_t V, const std::vector<int32_t>& tg,
               double cap, Vec* lse_out = nullptr) {
  Vec loss(N);
  if (lse_out) lse_out->assign(N, 0);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < V; ++c) mx = std::max(mx, cap * std::tanh(logits[n * ld + c] / cap));
    double s = 0;
    for (int64_t c = 0; c < V; ++c) s += std::exp(cap * std::tanh(logits[n * ld + c] / cap) - mx);
    const double lse = mx + std::log(s);
    if (lse_out) (*lse_out)[n] = lse;
    loss[n] = lse - cap * std::tanh(logits[n * ld + tg[n]] / cap);
  }
  return loss;
}

struct XentCase {
  int64_t N = 5, V = 50, ld = 64;
  double cap = 3.0;
  Vec logits;
  std::vector<int32_t> targets;
  explicit XentCase(uint64_t seed) {
    logits = randn(N * ld, seed, 4.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = V; c < ld; ++c) logits[n * ld + c] = 1e3;  // padding must be ignored
    targets = {0, 49, 31, 32, 7};
  }
};

TEST(KernelXent, FullVocabForwardMatchesNaive) {
  XentCase k(40);
  Vec lse_ref;
  const Vec loss_ref = naive_xent(k.logits, k.N, k.ld, k.V, k.targets, k.cap, &lse_ref);
  Vec mx(k.N, kNaN), se(k.N, kNaN), tz(k.N, kNaN);
  xent_partial_forward<double>(k.logits.data(), k.N, k.ld, k.V, 0, k.targets.data(), k.cap,
                               mx.data(), se.data(), tz.data());
  Vec loss(k.N), mx_ref(k.N);
  for (int64_t n = 0; n < k.N; ++n) {
    loss[n] = mx[n] + std::log(se[n]) - tz[n];
    mx_ref[n] = -INFINITY;
    for (int64_t c = 0; c < k.V; ++c)
      mx_ref[n] = std::max(mx_ref[n], k.cap * std::tanh(k.logits[n * k.ld + c] / k.cap));
  }
  expect_close(mx, mx_ref, 1e-14, "row_max");
  expect_close(loss, loss_ref, 1e-12, "loss");

  auto lf = cast<float>(k.logits);
  std::vector<float> mxf(k.N), sef(k.N), tzf(k.N);
  xent_partial_forward<float>(lf.data(), k.N, k.ld, k.V, 0, k.targets.data(), float(k.cap),
                              mxf.data(), sef.data(), tzf.data());
  Vec lossf(k.N);
  for (int64_t n = 0; n < k.N; ++n) lossf[n] = mxf[n] + std::log(double(sef[n])) - tzf[n];
  expect_close(lossf, loss_ref, 1e-5, "float loss");
}

// Two vocabulary slices [0, 32) and [32, 50), each stored with ld 32 (the second has 14 padding
// columns), combined as a vocab-parallel caller would; targets fall in both slices.
TEST(KernelXent, SlicesCombineToFullVocab) {
  XentCase k(41);
  const int64_t ldS = 32, nA = 32, nB = k.V - 32;
  Vec A(k.N * ldS), Bs(k.N * ldS, 7.0);
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t c = 0; c < ldS; ++c) {
      A[n * ldS + c] = k.logits[n * k.ld + c];
      if (c < nB) Bs[n * ldS + c] = k.logits[n * k.ld + 32 + c];
    }
  Vec mA(k.N), sA(k.N), tA(k.N), mB(k.N), sB(k.N), tB(k.N);
  xent_partial_forward<double>(A.data(), k.N, ldS, nA, 0, k.targets.data(), k.cap, mA.data(),
                               sA.data(), tA.data());
  xent_partial_forward<double>(Bs.data(), k.N, ldS, nB, 32, k.targets.data(), k.cap, mB.data(),
                               sB.data(), tB.data());
  Vec lse(k.N), loss(k.N);
  for (int64_t n = 0; n < k.N; ++n) {
    // target outside a slice contributes exactly 0 there
    if (k.targets[n] < 32) EXPECT_EQ(tB[n], 0.0) << n;
    else EXPECT_EQ(tA[n], 0.0) << n;
    const double M = std::max(mA[n], mB[n]);
    lse[n] = M + std::log(sA[n] * std::exp(mA[n] - M) + sB[n] * std::exp(mB[n] - M));
    loss[n] = lse[n] - (tA[n] + tB[n]);
  }
  Vec lse_ref;
  const Vec loss_ref = naive_xent(k.logits, k.N, k.ld, k.V, k.targets, k.cap, &lse_ref);
  expect_close(loss, loss_ref, 1e-12, "combined loss");
  expect_close(lse, lse_ref, 1e-12, "combined lse");

  // Backward per slice with the global lse equals the full backward's columns; padding is 0.
  const Vec dloss = randn(k.N, 42);
  Vec dfull(k.N * k.ld, kNaN), dA(k.N * ldS, kNaN), dB(k.N * ldS, kNaN);
  xent_backward<double>(k.logits.data(), k.N, k.ld, k.V, 0, k.targets.data(), k.cap, lse.data(),
                        dloss.data(), dfull.data());
  xent_backward<double>(A.data(), k.N, ldS, nA, 0, k.targets.data(), k.cap, lse.data(),
                        dloss.data(), dA.data());
  xent_backward<double>(Bs.data(), k.N, ldS, nB, 32, k.targets.data(), k.cap, lse.data(),
                        dloss.data(), dB.data());
  Vec gotA(k.N * ldS), gotB(k.N * ldS), wantA(k.N * ldS), wantB(k.N * ldS, 0.0);
  for (int64_t n = 0; n < k.N; ++n) {
    for (int64_t c = 0; c < ldS; ++c) {
      wantA[n * ldS + c] = dfull[n * k.ld + c];
      if (c < nB) wantB[n * ldS + c] = dfull[n * k.ld + 32 + c];
    }
    for (int64_t c = k.V; c < k.ld; ++c) EXPECT_EQ(dfull[n * k.ld + c], 0.0) << "full padding";
  }
  expect_close(dA, wantA, 1e-14, "slice A grad");
  expect_close(dB, wantB, 1e-14, "slice B grad (padding zero)");
}

TEST(KernelXent, BackwardMatchesFiniteDifferences) {
  XentCase k(43);
  const Vec dloss = randn(k.N, 44);
  Vec lse;
  naive_xent(k.logits, k.N, k.ld, k.V, k.targets, k.cap, &lse);
  // slice [16, 50) stored at ld 40 with col_offset 16: targets 0 and 7 are outside it
  const int64_t off = 16, ldS = 40, nv = k.V - off;
  Vec S(k.N * ldS, -3.0);
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t c = 0; c < nv; ++c) S[n * ldS + c] = k.logits[n * k.ld + off + c];
  Vec dS(S.size(), kNaN);
  xent_backward<double>(S.data(), k.N, ldS, nv, off, k.targets.data(), k.cap, lse.data(),
                        dloss.data(), dS.data());
  Vec full = k.logits;
  auto objective = [&] {
    for (int64_t n = 0; n < k.N; ++n)
      for (int64_t c = 0; c < nv; ++c) full[n * k.ld + off + c] = S[n * ldS + c];
    return dot(dloss, naive_xent(full, k.N, k.ld, k.V, k.targets, k.cap));
  };
  check_fd(S, objective, dS, "dlogits of slice (padding columns have zero grad)");

  auto lf = cast<float>(S), lsef = cast<float>(lse), dlf = cast<float>(dloss);
  std::vector<float> dSf(S.size());
  xent_backward<float>(lf.data(), k.N, ldS, nv, off, k.targets.data(), float(k.cap), lsef.data(),
                       dlf.data(), dSf.data());
  expect_close(dSf, dS, 2e-5, "float dlogits");
}

// The fused loss end against the unfused kernels (partial forward, lse = max + log(sumexp),
// loss = lse - target_z, backward with dloss = grad_scale) on one slice with padding columns,
// a column offset and targets inside and outside it (one in the padding): the fused kernels
// repeat the unfused arithmetic, so lse, loss and dlogits are equal bit for bit, out of place
// and in place. 197 valid columns: the float kernel's 8-lane part, its 64-column sum blocks
// and a scalar tail all run.
template <class T>
void check_loss_grad_equals_unfused() {
  const int64_t N = 9, ld = 203, nv = 197, off = 40;
  const T cap = T(15), g = T(0.37);
  const auto logits = cast<T>(randn(N * ld, 45, 8.0));  // std 8 against cap 15
  const std::vector<int32_t> targets = {40, 40 + 196, 40 + 197, 39, 0, 100, 150, 236, 1000};
  std::vector<T> mx(N), se(N), tz(N), lse(N), loss(N), dloss(N, g), dl(N * ld);
  xent_partial_forward<T>(logits.data(), N, ld, nv, off, targets.data(), cap, mx.data(),
                          se.data(), tz.data());
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = mx[n] + std::log(se[n]);
    loss[n] = lse[n] - tz[n];
  }
  xent_backward<T>(logits.data(), N, ld, nv, off, targets.data(), cap, lse.data(), dloss.data(),
                   dl.data());
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    std::vector<T> src = logits, out(N * ld, T(NAN)), flse(N, T(NAN)), floss(N, T(NAN));
    T* d = in_place ? src.data() : out.data();
    xent_loss_grad<T>(src.data(), N, ld, nv, off, targets.data(), cap, g, flse.data(),
                      floss.data(), d);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(flse[n], lse[n]) << n;
      EXPECT_EQ(floss[n], loss[n]) << n;
    }
    for (int64_t i = 0; i < N * ld; ++i) ASSERT_EQ(d[i], dl[i]) << i;
    if (!in_place) EXPECT_EQ(src, logits);
  }
}

TEST(KernelXent, LossGradEqualsUnfusedBitForBit) {
  check_loss_grad_equals_unfused<double>();
  check_loss_grad_equals_unfused<float>();
}

// ------------------------------------------------------------------------------------------
// Embedding

struct EmbCase {
  int64_t row_begin = 5, rows = 10, C;
  std::vector<int32_t> ids = {3, 5, 7, 14, 15, 7, 0, 9, 7, 40, 14};
  Vec table;
  explicit EmbCase(int64_t c) : C(c), table(randn(rows * c, 50)) {}
  bool owned(int32_t id) const { return id >= row_begin && id < row_begin + rows; }
  Vec naive_forward(const Vec& t) const {
    const int64_t N = ids.size();
    Vec out(N * C, 0.0);
    for (int64_t n = 0; n < N; ++n)
      if (owned(ids[n]))
        for (int64_t c = 0; c < C; ++c) out[n * C + c] = t[(ids[n] - row_begin) * C + c];
    return out;
  }
};

TEST(KernelEmbedding, ForwardAndBackwardWithRowRange) {
  for (int64_t C : {7, 150}) {
    EmbCase e(C);
    const int64_t N = e.ids.size();
    Vec out(N * C, kNaN);
    embedding_forward<double>(e.table.data(), e.row_begin, e.rows, C, e.ids.data(), N, out.data());
    expect_close(out, e.naive_forward(e.table), 0, "forward C=" + std::to_string(C));
    auto tf = cast<float>(e.table);
    std::vector<float> outf(N * C);
    embedding_forward<float>(tf.data(), e.row_begin, e.rows, C, e.ids.data(), N, outf.data());
    expect_close(outf, e.naive_forward(e.table), 1e-7, "float forward");

    // backward adds into the existing dtable; repeated ids sum, unowned ids do nothing
    const Vec dout = randn(N * C, 51);
    const Vec base = randn(e.rows * C, 52);
    Vec dt = base;
    embedding_backward<double>(dout.data(), e.ids.data(), N, e.row_begin, e.rows, C, dt.data());
    Vec grad(dt.size());
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = dt[i] - base[i];
    check_fd(e.table, [&] { return dot(dout, e.naive_forward(e.table)); }, grad, "dtable");
    Vec want = base;
    for (int64_t n = 0; n < N; ++n)
      if (e.owned(e.ids[n]))
        for (int64_t c = 0; c < C; ++c) want[(e.ids[n] - e.row_begin) * C + c] += dout[n * C + c];
    expect_close(dt, want, 1e-15, "scatter-add");
  }
}

TEST(KernelEmbedding, BackwardIsDeterministicAcrossThreadCounts) {
  const int64_t N = 4096, C = 200, rows = 37, row_begin = 11;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = int32_t((n * 7919) % 60);
  const auto dout = cast<float>(randn(N * C, 53));
  std::vector<float> a(rows * C, 0.f), b(rows * C, 0.f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  embedding_backward<float>(dout.data(), ids.data(), N, row_begin, rows, C, a.data());
  omp_set_num_threads(3);
  embedding_backward<float>(dout.data(), ids.data(), N, row_begin, rows, C, b.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace vt::cpu
