// One op-parity table (in the manner of ggml's test-backend-ops): one row per op, each running
// the op through the ops:: dispatch on the CPU backend and on the CUDA backend (the emulated one
// without a GPU) on the same inputs (bf16 inputs are the same bf16 values on both) and comparing
// forward and backward at tolerances derived from fp32 summation order and bf16 rounding. A new
// op is one row: a check function below and its line in kOps. Skips without a CUDA device.
//
// Tolerance rationale, used throughout:
//   - f32 paths: both sides compute in fp32 from identical inputs; they differ only in summation
//     order, fused multiply-adds and last-ulp differences of GPU tanhf/expf/logf (<= 2 ulp). Hence
//     ~1e-6 relative for elementwise ops and 1e-5..2e-5 for row reductions (fp32 block sums on
//     the GPU where the CPU sums in fp64), with absolute terms scaled by the data's magnitude.
//   - bf16 outputs: both sides round an fp32 result to bf16 once; when the fp32 results differ
//     by a hair, the roundings may land one bf16 ulp apart, 2^-8 relative (kBf16Rtol), so the
//     f32 tolerance plus kBf16Rtol. Where a row compares a bf16 GPU output with the CPU's
//     unrounded fp32 result on the same (bf16-valued) inputs, kBf16Rtol alone.
//   - pure data movement (copies, casts, transposes, gathers) and formulas evaluated identically
//     (add_scalar, gate_sigmoid_backward) are compared exactly.
//   - optimizer updates: the same fp32 operations on the same fp32 coefficients (formed in fp64
//     on the host from the same doubles); only FMA contraction may differ, 1e-6 relative.
//   - dot / sum_squares: products are exact in fp64 on both sides, sums in fp64 in another order:
//     1e-12 relative to sum |a_i b_i|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend_pair.h"
#include "core/backend.h"
#include "core/bf16.h"
#include "core/ops.h"
#include "core/ops/activation.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/optim.h"
#include "core/ops/reduce.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/value_gate.h"
#include "core/ops/xent.h"
#include "core/tensor.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

// bf16 values on the GPU, the same values as f32 on the CPU (whose results stay unrounded fp32).
Pair bf16_on_gpu(const std::vector<float>& v, Shape s) {
  return {host(v, s), host(v, s, kBF16).to(kGPU)};
}

// The raw bf16 bits of a bf16 tensor (any device).
std::vector<uint16_t> bf16_bits_of(const Tensor& t) {
  const Tensor h = t.to(kCPU);
  std::vector<uint16_t> bits(size_t(h.numel()));
  std::memcpy(bits.data(), h.raw(), bits.size() * sizeof(uint16_t));
  return bits;
}

// ------------------------------------------------------------------------------------------------
// Dense algebra, copies and reductions

// A (stored (M,K) or (K,M) when trans_a) with a padded leading dimension, etc. f32 tolerance:
// cuBLASLt and OpenBLAS add the K products in different orders; the difference grows like
// sqrt(K) ulps of the result's magnitude: atol 1e-6 * sqrt(K) * max|C|, rtol 1e-5. bf16 inputs
// make exact fp32 products, so the same holds with bf16 A/B; a bf16 C adds one rounding.
void GemmMatchesCpu() {
  const int64_t M = 33, N = 47, K = 70;
  struct Types {
    DType ab, c;
  };
  uint64_t seed = 10;
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kBF16, kF32}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(testing::Message() << name_of(ty.ab) << "->" << name_of(ty.c) << " ta=" << ta
                                        << " tb=" << tb);
        const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + 3;
        const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + 2;
        const int64_t ldc = N + 5;
        Pair A = pair(randn(a_rows * lda, seed++), {a_rows, lda}, ty.ab);
        Pair B = pair(randn(b_rows * ldb, seed++), {b_rows, ldb}, ty.ab);
        Pair C = pair(randn(M * ldc, seed++), {M, ldc}, ty.c);
        for (int dev = 0; dev < 2; ++dev) {
          GemmArgs g;
          g.trans_a = ta, g.trans_b = tb;
          g.M = M, g.N = N, g.K = K;
          g.alpha = 1.25f, g.beta = 0.5f;
          g.A = dev ? A.g : A.c, g.B = dev ? B.g : B.c, g.C = dev ? C.g : C.c;
          g.lda = lda, g.ldb = ldb, g.ldc = ldc;
          ops::gemm(g);
        }
        const double mx = max_abs(vals(C.c));
        EXPECT_TRUE(close(C, rtol_for(ty.c, 1e-5), 1e-6 * std::sqrt(double(K)) * mx));
      }
    }
  }
  // ops::matmul (beta 0: C's old values must not survive) and K = 0 (C = beta * C, or zeros
  // for beta 0).
  Pair x = pair(randn(20 * 30, 20), {20, 30}), w = pair(randn(30 * 40, 21), {30, 40});
  Pair y = pair(randn(20 * 40, 19, 100.0f), {20, 40});
  ops::matmul(x.c, w.c, y.c);
  ops::matmul(x.g, w.g, y.g);
  EXPECT_TRUE(close(y, 1e-5, 1e-6 * std::sqrt(30.0) * max_abs(vals(y.c))));
  for (float beta : {0.5f, 0.0f}) {
    Pair C = pair(randn(6 * 8, 22), {6, 8});
    Pair A = zeros({6, 1}), B = zeros({1, 8});
    for (int dev = 0; dev < 2; ++dev) {
      GemmArgs g;
      g.M = 5, g.N = 7, g.K = 0, g.beta = beta;
      g.A = dev ? A.g : A.c, g.B = dev ? B.g : B.c, g.C = dev ? C.g : C.c;
      g.lda = 1, g.ldb = 8, g.ldc = 8;
      ops::gemm(g);
    }
    EXPECT_TRUE(same(C)) << "K = 0, beta " << beta;
  }
}

// GemmArgs::addend (C = alpha op(A) op(B) + beta addend, C only written): on each backend the same
// bits as copying the addend into C and running the in-place GEMM, the addend left as it was, and
// the two backends within GemmMatchesCpu's tolerance of each other. C starts as garbage (NaN on
// the CPU; the emulated device poisons fresh memory) that must not leak into the result. A K = 0
// call is beta * addend. Refused: an addend overlapping C, of another dtype or size.
void GemmAddendIsCopyThenGemm() {
  const int64_t M = 21, N = 38, K = 45;
  struct Types {
    DType ab, c;
  };
  uint64_t seed = 90;
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kBF16, kF32}}) {
    for (int64_t k : {K, int64_t(0)}) {
      SCOPED_TRACE(testing::Message() << name_of(ty.ab) << "->" << name_of(ty.c) << " K=" << k);
      const int64_t ldc = N + 3;
      Pair A = pair(randn(M * K, seed++), {M, K}, ty.ab);
      Pair B = pair(randn(K * N, seed++), {K, N}, ty.ab);
      Pair D = pair(randn(M * ldc, seed++), {M, ldc}, ty.c);
      const std::vector<float> nan(size_t(M * ldc), std::nanf(""));
      Pair out = pair(nan, {M, ldc}, ty.c), ref = zeros({M, ldc}, ty.c);
      for (int dev = 0; dev < 2; ++dev) {
        const Tensor& d = dev ? D.g : D.c;
        GemmArgs g;
        g.M = M, g.N = N, g.K = k;
        g.alpha = 1.25f, g.beta = -0.75f;
        g.A = dev ? A.g : A.c, g.B = dev ? B.g : B.c;
        g.lda = K, g.ldb = N, g.ldc = ldc;
        g.C = dev ? out.g : out.c;
        g.addend = d;
        ops::gemm(g);
        GemmArgs in_place = g;
        in_place.addend = Tensor();
        in_place.C = dev ? ref.g : ref.c;
        in_place.C.copy_from(d);
        ops::gemm(in_place);
      }
      // Bit for bit against the in-place GEMM on each backend (the columns past N are C's own:
      // garbage in `out`, the addend's in `ref`; only the M x N window is the result).
      for (int dev = 0; dev < 2; ++dev) {
        const auto o = vals(dev ? out.g : out.c), r = vals(dev ? ref.g : ref.c);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j)
            ASSERT_EQ(o[size_t(i * ldc + j)], r[size_t(i * ldc + j)])
                << (dev ? "device" : "cpu") << " at " << i << "," << j;
      }
      Pair window = zeros({M, N}, ty.c);
      for (int dev = 0; dev < 2; ++dev) {
        const auto o = vals(dev ? out.g : out.c);
        std::vector<float> w(size_t(M * N));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) w[size_t(i * N + j)] = o[size_t(i * ldc + j)];
        (dev ? window.g : window.c).copy_from(host(w, {M, N}, ty.c).to(dev ? kGPU : kCPU));
      }
      const double mx = std::max(1.0, max_abs(vals(window.c)));
      EXPECT_TRUE(close(window, rtol_for(ty.c, 1e-5), 1e-6 * std::sqrt(double(K)) * mx));
      EXPECT_TRUE(same(D)) << "the addend was modified";
    }
  }
  // Refusals (checked before any backend is chosen: the host tensors stand for both).
  GemmArgs g;
  g.M = 4, g.N = 4, g.K = 4, g.beta = 1.0f, g.lda = 4, g.ldb = 4, g.ldc = 4;
  g.A = host(randn(16, 1), {4, 4}), g.B = host(randn(16, 2), {4, 4});
  g.C = host(randn(16, 3), {4, 4});
  GemmArgs overlap = g;
  overlap.addend = g.C;
  EXPECT_DEATH(ops::gemm(overlap), "addend overlaps C");
  GemmArgs dtype = g;
  dtype.addend = host(randn(16, 4), {4, 4}, kBF16);
  EXPECT_DEATH(ops::gemm(dtype), "addend must have C's dtype");
  GemmArgs size = g;
  size.addend = host(randn(12, 5), {3, 4});
  EXPECT_DEATH(ops::gemm(size), "addend holds 12 elements, C 16");
}

// GemmArgs::batch (strided batched GEMM, Muon's batched Newton-Schulz): on each backend every
// problem of the batch is bit for bit the unbatched GEMM on its matrices (strides padded past
// each problem's span, transposes, an addend, bf16 and f32), the padding between C's problems
// untouched; CPU and device within GemmMatchesCpu's tolerance. Refused: a batch count below 1,
// strides that let C's problems overlap, operands too short for the last problem.
void GemmBatchedIsEachProblem() {
  const int64_t M = 13, N = 22, K = 31, batch = 3;
  struct Types {
    DType ab, c;
  };
  uint64_t seed = 300;
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kBF16, kF32}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int addend = 0; addend < 2; ++addend) {
        SCOPED_TRACE(testing::Message() << name_of(ty.ab) << "->" << name_of(ty.c) << " ta=" << ta
                                        << " addend=" << addend);
        const int64_t lda = ta ? M : K, ldb = N, ldc = N + 2;
        const int64_t sa = M * K + 5, sb = K * N + 8, sc = M * ldc + 3;  // padded strides
        Pair A = pair(randn(batch * sa, seed++), {batch * sa}, ty.ab);
        Pair B = pair(randn(batch * sb, seed++), {batch * sb}, ty.ab);
        const auto c0 = randn(batch * sc, seed++);
        Pair Cin = pair(randn(batch * sc, seed++), {batch * sc}, ty.c);
        Pair C = pair(c0, {batch * sc}, ty.c), ref = pair(c0, {batch * sc}, ty.c);
        for (int dev = 0; dev < 2; ++dev) {
          GemmArgs g;
          g.trans_a = ta;
          g.M = M, g.N = N, g.K = K;
          g.alpha = 0.75f, g.beta = -1.5f;
          g.A = dev ? A.g : A.c, g.B = dev ? B.g : B.c, g.C = dev ? C.g : C.c;
          g.lda = lda, g.ldb = ldb, g.ldc = ldc;
          if (addend) g.addend = dev ? Cin.g : Cin.c;
          g.batch = batch, g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
          ops::gemm(g);
          for (int64_t i = 0; i < batch; ++i) {  // the unbatched calls, one per problem
            GemmArgs one = g;
            one.batch = 1, one.stride_a = one.stride_b = one.stride_c = 0;
            one.A = g.A.flat(i * sa, sa), one.B = g.B.flat(i * sb, sb);
            one.C = (dev ? ref.g : ref.c).flat(i * sc, sc);
            if (addend) one.addend = g.addend.flat(i * sc, sc);
            ops::gemm(one);
          }
        }
        for (int dev = 0; dev < 2; ++dev)
          EXPECT_EQ(vals(dev ? C.g : C.c), vals(dev ? ref.g : ref.c))
              << (dev ? "device" : "cpu") << ": batched differs from the problems one by one";
        // Outside each problem's M x N window (the padding) the device's C keeps its old values
        // (the host copies a whole addend into C first: padding included, GemmArgs::addend).
        const auto got = vals(C.g), old = vals(host(c0, {batch * sc}, ty.c));
        std::vector<float> win_c, win_g;  // the problems' windows, CPU and device
        const auto cpu = vals(C.c);
        for (int64_t i = 0; i < batch; ++i)
          for (int64_t e = 0; e < sc; ++e) {
            const int64_t r = e / ldc, col = e % ldc;
            const size_t at = size_t(i * sc + e);
            if (r >= M || col >= N) {
              ASSERT_EQ(got[at], old[at]) << "padding written at " << at;
            } else {
              win_c.push_back(cpu[at]);
              win_g.push_back(got[at]);
            }
          }
        const double mx = std::max(1.0, max_abs(win_c));
        EXPECT_TRUE(all_close(win_g, win_c, rtol_for(ty.c, 1e-5), 1e-6 * std::sqrt(double(K)) * mx));
      }
    }
  }
  GemmArgs g;
  g.M = 4, g.N = 4, g.K = 4, g.lda = 4, g.ldb = 4, g.ldc = 4;
  g.A = host(randn(32, 1), {32}), g.B = host(randn(32, 2), {32}), g.C = host(randn(32, 3), {32});
  g.batch = 2, g.stride_a = 16, g.stride_b = 16, g.stride_c = 16;
  GemmArgs zero = g;
  zero.batch = 0;
  EXPECT_DEATH(ops::gemm(zero), "batch count 0 must be >= 1");
  GemmArgs overlap = g;
  overlap.stride_c = 8;
  EXPECT_DEATH(ops::gemm(overlap), "C's problems span 16 elements");
  GemmArgs short_c = g;
  short_c.batch = 3;
  EXPECT_DEATH(ops::gemm(short_c), "a batch of 3 needs");
}

// normalize_frobenius_segments: on each backend bit for bit normalize_frobenius on each segment
// alone (in place; into f32 and bf16; segment lengths that are whole 16-byte words and ones that
// are not, which take the kernels' scalar path from the second segment on; one segment longer
// than a reduction grid's worth), x left as it was; CPU and device within the per-segment op's
// tolerance (DeviceCoefficientOpsMatchCpu). Refused: a length that is not whole segments.
void NormalizeSegmentsIsEachSegment() {
  uint64_t seed = 320;
  for (int64_t n : {int64_t(4096), int64_t(4099), int64_t(1) << 20}) {
    const int64_t segs = n > 5000 ? 2 : 5;
    for (int into = 0; into < 3; ++into) {  // 0: in place, 1: f32 out, 2: bf16 out
      SCOPED_TRACE(testing::Message() << "n " << n << " into " << into);
      const DType out_dt = into == 2 ? kBF16 : kF32;
      auto v = randn(segs * n, seed++, 1.0f);
      for (int64_t s = 0; s < segs; ++s)  // segments of different norms
        for (int64_t i = 0; i < n; ++i) v[size_t(s * n + i)] *= float(1 + 3 * s);
      Pair x = pair(v, {segs * n});
      Pair out = zeros({segs * n}, out_dt), ref = zeros({segs * n}, out_dt);
      for (int dev = 0; dev < 2; ++dev) {
        const Tensor& xs = dev ? x.g : x.c;
        const Tensor& o = dev ? out.g : out.c;
        const Tensor& r = dev ? ref.g : ref.c;
        if (into == 0) {
          o.copy_from(xs);
          ops::normalize_frobenius_segments(o, segs, 1.02, 1e-6);
        } else {
          ops::normalize_frobenius_segments(xs, segs, 1.02, 1e-6, o);
        }
        for (int64_t s = 0; s < segs; ++s) {
          if (into == 0) {
            r.flat(s * n, n).copy_from(xs.flat(s * n, n));
            ops::normalize_frobenius(r.flat(s * n, n), 1.02, 1e-6);
          } else {
            ops::normalize_frobenius(xs.flat(s * n, n), 1.02, 1e-6, r.flat(s * n, n));
          }
        }
      }
      for (int dev = 0; dev < 2; ++dev)
        EXPECT_EQ(vals(dev ? out.g : out.c), vals(dev ? ref.g : ref.c))
            << (dev ? "device" : "cpu");
      EXPECT_TRUE(same(x)) << "x was written";
      EXPECT_TRUE(close(out, rtol_for(out_dt, 1e-6), 1e-7));
    }
  }
  EXPECT_DEATH(ops::normalize_frobenius_segments(host(randn(10, 1), {10}), 3, 1.0, 1e-7),
               "10 elements are not 3 equal segments");
}

// Round to nearest even on both sides: bitwise equal (no NaNs, whose payloads may differ).
void CastMatchesCpuExactly() {
  auto x = randn(4099, 30, 3.0f);
  x[0] = 1e38f, x[1] = -3.4e38f, x[2] = 1e-40f, x[3] = INFINITY, x[4] = -0.0f;
  x[5] = 1.0f + 1.0f / 256;  // a tie: rounds to even
  Pair f = pair(x, {4099});
  Pair b = zeros({4099}, kBF16);
  ops::copy(b.c, f.c);
  ops::copy(b.g, f.g);
  EXPECT_TRUE(same(b));
  Pair back = zeros({4099});
  ops::copy(back.c, b.c);
  ops::copy(back.g, b.g);
  EXPECT_TRUE(same(back));
}

// Every f32 -> bf16 -> f32 round trip of the cast kernels is the host round-to-nearest-even bit
// for bit (EXPECT_EQ on the bf16 bits: -0 and +0 differ), including ties, infinities, the
// largest values and subnormals; the way back is exact.
void CastRoundTripBitExact() {
  auto x = randn(70001, 51, 100.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* tie: 1 + 2^-8 */,
                            1.01171875f /* tie: 1 + 3*2^-8 */, 3.0e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e-40f, -1e-39f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  const int64_t n = int64_t(x.size());
  const Tensor f = host(x, {n}).to(kGPU);
  const Tensor b = Tensor::zeros({n}, kBF16, kGPU), back = Tensor::zeros({n}, kF32, kGPU);
  ops::copy(b, f);
  ops::copy(back, b);
  const std::vector<uint16_t> bits = bf16_bits_of(b);
  EXPECT_EQ(bits, to_bf16(x));
  EXPECT_EQ(vals(back), from_bf16(bits));
}

void AxpyAndScaleCopyMatchCpu() {
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    Pair y = pair(randn(10007, 40), {10007}, dt), x = pair(randn(10007, 41), {10007}, dt);
    ops::axpy(y.c, x.c, -0.75f);
    ops::axpy(y.g, x.g, -0.75f);
    EXPECT_TRUE(close(y, rtol_for(dt, 1e-6), 1e-6));
    Pair z = zeros({10007}, dt);
    ops::scale_copy(z.c, x.c, 3.5f);
    ops::scale_copy(z.g, x.g, 3.5f);
    EXPECT_TRUE(close(z, rtol_for(dt, 1e-6), 0.0));
    ops::scale_copy(x.c, x.c, 0.1f);  // in place
    ops::scale_copy(x.g, x.g, 0.1f);
    EXPECT_TRUE(close(x, rtol_for(dt, 1e-6), 0.0));
  }
}

void DotAndSumSquaresMatchCpu() {
  const int64_t n = 100003;
  const auto av = randn(n, 50), bv = randn(n, 51);
  struct Types {
    DType a, b;
  };
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kF32, kBF16}}) {
    SCOPED_TRACE(testing::Message() << name_of(ty.a) << "." << name_of(ty.b));
    Pair a = pair(av, {n}, ty.a), b = pair(bv, {n}, ty.b);
    const auto ah = vals(a.c), bh = vals(b.c);
    double abs_dot = 0, abs_ss = 0;
    for (int64_t i = 0; i < n; ++i) {
      abs_dot += std::fabs(double(ah[i]) * bh[i]);
      abs_ss += double(ah[i]) * ah[i];
    }
    EXPECT_NEAR(ops::dot(a.g, b.g), ops::dot(a.c, b.c), 1e-12 * abs_dot);
    EXPECT_NEAR(ops::sum_squares(a.g), ops::sum_squares(a.c), 1e-12 * abs_ss);
  }
}

// Coefficients read on the device: the same fp32 products as the host-coefficient ops (one
// bf16 rounding of bf16 outputs); dot_into stores the fp64 dot rounded to fp32 (sums differ in
// order only: 1e-6 of the dot's magnitude); normalize_frobenius divides by the norm in double.
void DeviceCoefficientOpsMatchCpu() {
  Pair coef = pair({0.75f, -1.25f, 3.0f}, {3});
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    Pair x = pair(randn(5003, 70), {5003}, dt), y = pair(randn(5003, 71), {5003}, dt);
    ops::axpy_coef(y.c, x.c, coef.c, 1);
    ops::axpy_coef(y.g, x.g, coef.g, 1);
    EXPECT_TRUE(close(y, rtol_for(dt, 1e-6), 1e-6));
    Pair z = zeros({5003}, dt);
    ops::scale_copy_coef(z.c, x.c, coef.c, 2);
    ops::scale_copy_coef(z.g, x.g, coef.g, 2);
    EXPECT_TRUE(close(z, rtol_for(dt, 1e-6), 0.0));
    Pair out = zeros({4});
    ops::dot_into(x.c, y.c, out.c, 3);
    ops::dot_into(x.g, y.g, out.g, 3);
    EXPECT_TRUE(close(out, 1e-6, 1e-6));
    Pair w = pair(randn(4096, 72), {64, 64}, dt);
    ops::normalize_frobenius(w.c, 1.02, 1e-6);
    ops::normalize_frobenius(w.g, 1.02, 1e-6);
    EXPECT_TRUE(close(w, rtol_for(dt, 1e-6), 1e-7));
  }
}

// normalize_frobenius into another tensor: on each backend the bits of copying x, normalizing
// the copy and casting it (f32 and bf16 outputs; an odd-offset view takes the kernels' scalar
// path), x left as it was; CPU and device within the in-place op's tolerance.
void NormalizeIntoIsCopyNormalizeCast() {
  for (DType out_dt : {kF32, kBF16}) {
    for (int64_t offset : {int64_t(0), int64_t(3)}) {
      SCOPED_TRACE(testing::Message() << name_of(out_dt) << " offset " << offset);
      const int64_t n = 4099;
      Pair x = pair(randn(n + offset, 80, 2.0f), {n + offset});
      Pair out = zeros({n}, out_dt), ref = zeros({n}, out_dt);
      for (int dev = 0; dev < 2; ++dev) {
        const Tensor xs = (dev ? x.g : x.c).flat(offset, n);
        ops::normalize_frobenius(xs, 1.02, 1e-6, dev ? out.g : out.c);
        const Tensor copy = Tensor::zeros({n}, kF32, dev ? kGPU : kCPU);
        copy.copy_from(xs);
        ops::normalize_frobenius(copy, 1.02, 1e-6);
        ops::copy(dev ? ref.g : ref.c, copy);
      }
      for (int dev = 0; dev < 2; ++dev)
        EXPECT_EQ(vals(dev ? out.g : out.c), vals(dev ? ref.g : ref.c))
            << (dev ? "device" : "cpu");
      EXPECT_TRUE(same(x)) << "x was written";
      EXPECT_TRUE(close(out, rtol_for(out_dt, 1e-6), 1e-7));
    }
  }
}

void AddScalarMatchesCpuExactly() {
  Pair t = pair(randn(100, 60), {100});
  for (int i = 0; i < 3; ++i) {
    ops::add_scalar(t.c, 17, 0.123456789);
    ops::add_scalar(t.g, 17, 0.123456789);
    ops::add_scalar(t.c, 99, -2.5e-3 * i);
    ops::add_scalar(t.g, 99, -2.5e-3 * i);
  }
  EXPECT_TRUE(same(t));
}

void TransposeMatchesCpuExactly() {
  const int64_t shapes[][2] = {{37, 70}, {1, 5}, {64, 32}, {65, 33}, {300, 1}};
  uint64_t seed = 70;
  for (DType dt : {kF32, kBF16}) {
    for (const auto& s : shapes) {
      SCOPED_TRACE(testing::Message() << name_of(dt) << " " << s[0] << "x" << s[1]);
      Pair x = pair(randn(s[0] * s[1], seed++), {s[0], s[1]}, dt);
      Pair y = zeros({s[1], s[0]}, dt);
      ops::transpose(y.c, x.c, s[0], s[1]);
      ops::transpose(y.g, x.g, s[0], s[1]);
      EXPECT_TRUE(same(y));
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Model ops

// Row sums of squares / of dy*x: fp32 block sums on the GPU, fp64 on the CPU: 2e-5 relative;
// dx's atol scales with its magnitude (cancellation in dy - x * b).
void RmsNormMatchesCpu() {
  const int64_t R = 19, C = 200;
  struct Types {
    DType x, y;
  };
  uint64_t seed = 80;
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kF32, kBF16}, Types{kBF16, kF32}}) {
    SCOPED_TRACE(testing::Message() << name_of(ty.x) << "->" << name_of(ty.y));
    Pair x = pair(randn(R * C, seed++, 2.0f), {R, C}, ty.x);
    Pair y = zeros({R, C}, ty.y), rstd = zeros({R});
    ops::rmsnorm(x.c, y.c, rstd.c, 1.2f, 1e-6);
    ops::rmsnorm(x.g, y.g, rstd.g, 1.2f, 1e-6);
    EXPECT_TRUE(close(rstd, 2e-5, 0.0));
    EXPECT_TRUE(close(y, rtol_for(ty.y, 2e-5), 1e-6));
    // Backward from identical inputs (the CPU's rstd on both), written and accumulated; dy and
    // dx take y's dtype (a mixed call when x's differs).
    const Tensor r = rstd.c.to(kGPU);
    for (bool acc : {false, true}) {
      Pair dy = pair(randn(R * C, seed++), {R, C}, ty.y);
      Pair dx = pair(randn(R * C, seed++), {R, C}, ty.y);
      ops::rmsnorm_backward(x.c, rstd.c, dy.c, dx.c, 1.2f, acc);
      ops::rmsnorm_backward(x.g, r, dy.g, dx.g, 1.2f, acc);
      EXPECT_TRUE(close(dx, rtol_for(ty.y, 2e-5), 2e-5 * max_abs(vals(dx.c)))) << "acc " << acc;
    }
  }
}

// The residual add fused with RMSNorm (kernels/rmsnorm.cu add_rmsnorm_forward_kernel): the sum
// x + delta is one fp32 addition rounded once to x's dtype on both sides, so x and keep match
// exactly; y and rstd are the norm's, at RmsNormMatchesCpu's tolerances. Then against the
// unfused ops on the GPU itself (axpy, a copy, rmsnorm): bit for bit, the same arithmetic.
void AddRmsNormMatchesCpu() {
  const int64_t R = 19, C = 200;
  uint64_t seed = 85;
  for (DType dt : {kF32, kBF16}) {
    for (bool keeps : {true, false}) {
      SCOPED_TRACE(testing::Message() << name_of(dt) << (keeps ? " keep" : " no keep"));
      const std::vector<float> xv = randn(R * C, seed++, 2.0f), dv = randn(R * C, seed++);
      Pair x = pair(xv, {R, C}, dt), delta = pair(dv, {R, C}, dt);
      Pair keep = keeps ? zeros({R, C}, dt) : Pair{};
      Pair y = zeros({R, C}, dt), rstd = zeros({R});
      ops::add_rmsnorm(x.c, delta.c, keep.c, y.c, rstd.c, 1.0f, 1e-6);
      ops::add_rmsnorm(x.g, delta.g, keep.g, y.g, rstd.g, 1.0f, 1e-6);
      EXPECT_TRUE(same(x));
      if (keeps) EXPECT_TRUE(same(keep));
      EXPECT_TRUE(close(rstd, 2e-5, 0.0));
      EXPECT_TRUE(close(y, rtol_for(dt, 2e-5), 1e-6));
      // The GPU's unfused ops from the same inputs.
      Tensor x2 = pair(xv, {R, C}, dt).g, y2 = zeros({R, C}, dt).g, r2 = zeros({R}).g;
      ops::axpy(x2, delta.g);
      ops::rmsnorm(x2, y2, r2, 1.0f, 1e-6);
      EXPECT_TRUE(same(Pair{x2, x.g}));
      EXPECT_TRUE(same(Pair{y2, y.g}));
      EXPECT_TRUE(same(Pair{r2, rstd.g}));
    }
  }
}

// rmsnorm_backward with a second upstream gradient dy2 (the parallel blocks' two branches): the
// sum dy + dy2 is rounded once to the dtype on both sides, then RmsNormMatchesCpu's backward
// tolerances; and on the GPU bit for bit against axpy(dy, dy2) then rmsnorm_backward.
void RmsNormBackwardSumMatchesCpu() {
  const int64_t R = 19, C = 200;
  uint64_t seed = 95;
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    Pair x = pair(randn(R * C, seed++, 2.0f), {R, C}, dt);
    Pair y = zeros({R, C}, dt), rstd = zeros({R});
    ops::rmsnorm(x.c, y.c, rstd.c, 1.0f, 1e-6);
    const Tensor r = rstd.c.to(kGPU);
    for (bool acc : {false, true}) {
      const std::vector<float> dyv = randn(R * C, seed++), dxv = randn(R * C, seed++);
      Pair dy = pair(dyv, {R, C}, dt), dy2 = pair(randn(R * C, seed++), {R, C}, dt);
      Pair dx = pair(dxv, {R, C}, dt);
      ops::rmsnorm_backward(x.c, rstd.c, dy.c, dx.c, 1.0f, acc, dy2.c);
      ops::rmsnorm_backward(x.g, r, dy.g, dx.g, 1.0f, acc, dy2.g);
      EXPECT_TRUE(close(dx, rtol_for(dt, 2e-5), 2e-5 * max_abs(vals(dx.c)))) << "acc " << acc;
      Tensor g = pair(dyv, {R, C}, dt).g, dx2 = pair(dxv, {R, C}, dt).g;
      ops::axpy(g, dy2.g);
      ops::rmsnorm_backward(x.g, r, g, dx2, 1.0f, acc);
      EXPECT_TRUE(same(Pair{dx2, dx.g})) << "acc " << acc;
    }
  }
}

// Angles in fp64 on both sides (the GPU forms base^(-2j/hd) as an exp2, the CPU with pow, so
// they may differ in the last fp64 bits), cos/sin rounded to fp32, one fp32 rotation: a few fp32
// ulps; atol 1e-5 * max|x| and rtol 1e-5 leave room.
void RopeMatchesCpu() {
  uint64_t seed = 90;
  for (DType dt : {kF32, kBF16}) {
    for (int64_t offset : {0, 37}) {
      SCOPED_TRACE(testing::Message() << name_of(dt) << " offset " << offset);
      Pair x = pair(randn(2 * 16 * 3 * 32, seed++), {2, 16, 3, 32}, dt);
      Pair y = zeros({2, 16, 3, 32}, dt), dx = zeros({2, 16, 3, 32}, dt);
      ops::rope(x.c, y.c, 10000.0, offset);
      ops::rope(x.g, y.g, 10000.0, offset);
      const double atol = 1e-5 * max_abs(vals(x.c));
      EXPECT_TRUE(close(y, rtol_for(dt, 1e-5), atol));
      ops::rope_backward(x.c, dx.c, 10000.0, offset);
      ops::rope_backward(x.g, dx.g, 10000.0, offset);
      EXPECT_TRUE(close(dx, rtol_for(dt, 1e-5), atol));
      ops::rope(x.c, x.c, 500.0, offset);  // in place
      ops::rope(x.g, x.g, 500.0, offset);
      EXPECT_TRUE(close(x, rtol_for(dt, 1e-5), atol));
    }
  }
  // Decoding token by token: one position per call at growing offsets, so the backend's cached
  // table (per head dim and base) is regrown along the way; every call still matches the CPU.
  for (int64_t offset = 0; offset < 150; offset += 7) {
    SCOPED_TRACE(testing::Message() << "decode offset " << offset);
    Pair x = pair(randn(3 * 1 * 2 * 32, seed++), {3, 1, 2, 32}), y = zeros({3, 1, 2, 32});
    ops::rope(x.c, y.c, 10000.0, offset);
    ops::rope(x.g, y.g, 10000.0, offset);
    ASSERT_TRUE(close(y, 1e-5, 1e-5 * max_abs(vals(x.c))));
  }
}

// RoPE fused with QK-norm (kernels/rope.cu rope_rmsnorm_forward_kernel, one warp per head
// vector): the GPU's cos/sin table (angles through exp2 where the CPU uses pow, both rounded to
// fp32) and its fp32 warp sum (the CPU sums in fp64) differ from the CPU by a few fp32 ulps:
// RmsNormMatchesCpu's 2e-5 relative; bf16 outputs may round one bf16 ulp apart, which is up to
// 2^-7 of the value (just above a power of two; kBf16Rtol, 2^-8, bounds half an ulp, one
// rounding against an unrounded value), so 2 kBf16Rtol more. Head dims 6 (one pair
// per lane, most lanes idle), 32, 128 (two pairs per lane: the presets') and 200 (four, the last
// partly filled); offsets 0 and 37; in place equal to out of place on the GPU bit for bit; then
// decoding's one position per call at growing offsets (the cached table regrown).
void RopeRmsNormMatchesCpu() {
  uint64_t seed = 300;
  for (DType dt : {kF32, kBF16}) {
    for (int64_t hd : {6, 32, 128, 200}) {
      for (int64_t offset : {0, 37}) {
        SCOPED_TRACE(testing::Message() << name_of(dt) << " hd " << hd << " offset " << offset);
        const Shape s{2, 16, 3, hd};
        const std::vector<float> xv = randn(2 * 16 * 3 * hd, seed++, 2.0f);
        Pair x = pair(xv, s, dt), y = zeros(s, dt), rstd = zeros({2 * 16 * 3});
        ops::rope_rmsnorm(x.c, y.c, rstd.c, 10000.0, 1.2f, 1e-6, offset);
        ops::rope_rmsnorm(x.g, y.g, rstd.g, 10000.0, 1.2f, 1e-6, offset);
        EXPECT_TRUE(close(rstd, 2e-5, 0.0));
        const double rtol = dt == kBF16 ? 2e-5 + 2 * kBf16Rtol : 2e-5;
        EXPECT_TRUE(close(y, rtol, 1e-6 * max_abs(vals(y.c))));
        Tensor xi = pair(xv, s, dt).g, ri = zeros({2 * 16 * 3}).g;
        ops::rope_rmsnorm(xi, xi, ri, 10000.0, 1.2f, 1e-6, offset);
        EXPECT_TRUE(same(Pair{xi, y.g})) << "in place";
        EXPECT_TRUE(same(Pair{ri, rstd.g})) << "in place rstd";
      }
    }
  }
  for (int64_t offset = 0; offset < 150; offset += 7) {
    SCOPED_TRACE(testing::Message() << "decode offset " << offset);
    Pair x = pair(randn(1 * 1 * 2 * 64, seed++), {1, 1, 2, 64}), y = zeros({1, 1, 2, 64});
    Pair rstd = zeros({2});
    ops::rope_rmsnorm(x.c, y.c, rstd.c, 10000.0, 1.2f, 1e-6, offset);
    ops::rope_rmsnorm(x.g, y.g, rstd.g, 10000.0, 1.2f, 1e-6, offset);
    ASSERT_TRUE(close(y, 2e-5, 1e-6 * max_abs(vals(y.c))));
    ASSERT_TRUE(close(rstd, 2e-5, 0.0));
  }
}

// Its backward (rope_rmsnorm_backward_kernel) from identical inputs (the CPU's rstd on both):
// the fp32 dot product g . x summed in a warp (fp64 on the CPU) and the cancellation in
// g - x b: RmsNormMatchesCpu's backward tolerances (2e-5 relative, atol 2e-5 * max|dx|), and
// for bf16 one bf16 ulp apart (2 kBf16Rtol, as above). dx = dy in place equal to a dx of its
// own bit for bit on the GPU.
void RopeRmsNormBackwardMatchesCpu() {
  uint64_t seed = 400;
  for (DType dt : {kF32, kBF16}) {
    for (int64_t hd : {6, 32, 128, 200}) {
      for (int64_t offset : {0, 37}) {
        SCOPED_TRACE(testing::Message() << name_of(dt) << " hd " << hd << " offset " << offset);
        const Shape s{2, 16, 3, hd};
        Pair x = pair(randn(2 * 16 * 3 * hd, seed++, 2.0f), s, dt);
        Pair y = zeros(s, dt), rstd = zeros({2 * 16 * 3});
        ops::rope_rmsnorm(x.c, y.c, rstd.c, 10000.0, 1.2f, 1e-6, offset);
        const Tensor r = rstd.c.to(kGPU);
        const std::vector<float> dyv = randn(2 * 16 * 3 * hd, seed++);
        Pair dy = pair(dyv, s, dt), dx = zeros(s, dt);
        ops::rope_rmsnorm_backward(x.c, rstd.c, dy.c, dx.c, 10000.0, 1.2f, offset);
        ops::rope_rmsnorm_backward(x.g, r, dy.g, dx.g, 10000.0, 1.2f, offset);
        const double rtol = dt == kBF16 ? 2e-5 + 2 * kBf16Rtol : 2e-5;
        EXPECT_TRUE(close(dx, rtol, 2e-5 * max_abs(vals(dx.c))));
        Tensor g = pair(dyv, s, dt).g;
        ops::rope_rmsnorm_backward(x.g, r, g, g, 10000.0, 1.2f, offset);
        EXPECT_TRUE(same(Pair{g, dx.g})) << "in place";
      }
    }
  }
}

// Tolerances of tests/gpu/attention_test.cc: f32 1e-5 (forward) / 1e-4 (backward) relative
// norm; the bf16 kernels round probability tiles to bf16: 1e-2 forward, 3e-2 backward. The
// backward runs on identical inputs (the CPU's out and lse on both devices).
void AttentionMatchesCpu() {
  struct Shape5 {
    int64_t B, T, H, Hkv, hd, window;
  };
  uint64_t seed = 100;
  for (DType dt : {kF32, kBF16}) {
    for (Shape5 s : {Shape5{2, 40, 4, 2, 32, 40}, Shape5{1, 70, 2, 1, 64, 16}}) {
      SCOPED_TRACE(testing::Message() << name_of(dt) << " T=" << s.T << " W=" << s.window);
      const Shape qs = {s.B, s.T, s.H, s.hd}, ks = {s.B, s.T, s.Hkv, s.hd};
      const int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.Hkv * s.hd;
      const float scale = 1.0f / std::sqrt(float(s.hd));
      Pair q = pair(randn(nq, seed++), qs, dt), k = pair(randn(nk, seed++), ks, dt);
      Pair v = pair(randn(nk, seed++), ks, dt), dout = pair(randn(nq, seed++), qs, dt);
      Pair out = zeros(qs, dt), lse = zeros({s.B, s.H, s.T});
      ops::attention(q.c, k.c, v.c, out.c, lse.c, s.window, scale);
      ops::attention(q.g, k.g, v.g, out.g, lse.g, s.window, scale);
      const bool bf = dt == kBF16;
      expect_rel_norm(out, bf ? 1e-2 : 1e-5, "out");
      EXPECT_TRUE(close(lse, bf ? 1e-4 : 1e-5, bf ? 1e-4 : 1e-5));
      const Tensor out_c = out.c.to(kGPU), lse_c = lse.c.to(kGPU);
      Pair dq = zeros(qs, dt), dk = zeros(ks, dt), dv = zeros(ks, dt);
      ops::attention_backward(q.c, k.c, v.c, out.c, lse.c, dout.c, dq.c, dk.c, dv.c, s.window,
                              scale);
      ops::attention_backward(q.g, k.g, v.g, out_c, lse_c, dout.g, dq.g, dk.g, dv.g, s.window,
                              scale);
      expect_rel_norm(dq, bf ? 3e-2 : 1e-4, "dq");
      expect_rel_norm(dk, bf ? 3e-2 : 1e-4, "dk");
      expect_rel_norm(dv, bf ? 3e-2 : 1e-4, "dv");
    }
  }
}

// The attention backward that goes on through the RoPE + QK-norm in front of it
// (ops::AttnQkNormGrad; on bf16 tensor-core shapes the dQ/dK kernels' epilogue): against the
// CPU at AttentionMatchesCpu's backward tolerances, and on the GPU bit for bit the unfused pair
// (the plain backward, then rope_rmsnorm_backward in place) from the same inputs.
void AttentionBackwardQkNormMatchesCpu() {
  struct Shape5 {
    int64_t B, T, H, Hkv, hd, window;
  };
  uint64_t seed = 150;
  for (DType dt : {kF32, kBF16}) {
    for (Shape5 s : {Shape5{2, 40, 4, 2, 32, 40}, Shape5{1, 70, 2, 1, 64, 16}}) {
      SCOPED_TRACE(testing::Message() << name_of(dt) << " T=" << s.T << " W=" << s.window);
      const Shape qs = {s.B, s.T, s.H, s.hd}, ks = {s.B, s.T, s.Hkv, s.hd};
      const int64_t nq = s.B * s.T * s.H * s.hd, nk = s.B * s.T * s.Hkv * s.hd;
      const float scale = 1.0f / std::sqrt(float(s.hd));
      Pair xq = pair(randn(nq, seed++, 2.0f), qs, dt), xk = pair(randn(nk, seed++), ks, dt);
      Pair v = pair(randn(nk, seed++), ks, dt), dout = pair(randn(nq, seed++), qs, dt);
      Pair q = zeros(qs, dt), k = zeros(ks, dt);
      Pair rq = zeros({s.B * s.T * s.H}), rk = zeros({s.B * s.T * s.Hkv});
      ops::rope_rmsnorm(xq.c, q.c, rq.c, 10000.0, 1.2f, 1e-6);
      ops::rope_rmsnorm(xk.c, k.c, rk.c, 10000.0, 1.2f, 1e-6);
      // Identical inputs on both devices: the CPU's q, k, rstd, out and lse.
      const Tensor qg = q.c.to(kGPU), kg = k.c.to(kGPU), rqg = rq.c.to(kGPU), rkg = rk.c.to(kGPU);
      Pair out = zeros(qs, dt), lse = zeros({s.B, s.H, s.T});
      ops::attention(q.c, k.c, v.c, out.c, lse.c, s.window, scale);
      const Tensor out_c = out.c.to(kGPU), lse_c = lse.c.to(kGPU);
      ops::AttnQkNormGrad qc{xq.c, rq.c, xk.c, rk.c, 10000.0, 1.2f};
      ops::AttnQkNormGrad qgr{xq.g, rqg, xk.g, rkg, 10000.0, 1.2f};
      Pair dq = zeros(qs, dt), dk = zeros(ks, dt), dv = zeros(ks, dt);
      ops::attention_backward(q.c, k.c, v.c, out.c, lse.c, dout.c, dq.c, dk.c, dv.c, s.window,
                              scale, {}, {}, qc);
      ops::attention_backward(qg, kg, v.g, out_c, lse_c, dout.g, dq.g, dk.g, dv.g, s.window,
                              scale, {}, {}, qgr);
      const bool bf = dt == kBF16;
      expect_rel_norm(dq, bf ? 3e-2 : 1e-4, "dq");
      expect_rel_norm(dk, bf ? 3e-2 : 1e-4, "dk");
      expect_rel_norm(dv, bf ? 3e-2 : 1e-4, "dv");
      Tensor udq = Tensor::zeros(qs, dt, kGPU), udk = Tensor::zeros(ks, dt, kGPU);
      Tensor udv = Tensor::zeros(ks, dt, kGPU);
      ops::attention_backward(qg, kg, v.g, out_c, lse_c, dout.g, udq, udk, udv, s.window, scale);
      ops::rope_rmsnorm_backward(xq.g, rqg, udq, udq, 10000.0, 1.2f);
      ops::rope_rmsnorm_backward(xk.g, rkg, udk, udk, 10000.0, 1.2f);
      EXPECT_TRUE(same(Pair{dq.g, udq})) << "dq: fused and unfused on the GPU";
      EXPECT_TRUE(same(Pair{dk.g, udk})) << "dk: fused and unfused on the GPU";
      EXPECT_TRUE(same(Pair{dv.g, udv})) << "dv";
    }
  }
}

// relu^2 and its derivative are the same fp32 products on both sides: 1e-6.
void Relu2MatchesCpu() {
  uint64_t seed = 110;
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    Pair x = pair(randn(5000, seed++), {5000}, dt), y = zeros({5000}, dt);
    ops::relu2(x.c, y.c);
    ops::relu2(x.g, y.g);
    EXPECT_TRUE(close(y, rtol_for(dt, 1e-6), 0.0));
    for (bool acc : {false, true}) {
      Pair dy = pair(randn(5000, seed++), {5000}, dt), dx = pair(randn(5000, seed++), {5000}, dt);
      ops::relu2_backward(x.c, dy.c, dx.c, acc);
      ops::relu2_backward(x.g, dy.g, dx.g, acc);
      EXPECT_TRUE(close(dx, rtol_for(dt, 1e-6), 1e-6)) << "acc " << acc;
    }
  }
  // Mixed dtypes (x bf16, y and the gradients f32): the backend's fp32 promotion path.
  Pair x = pair(randn(777, seed++), {777}, kBF16), y = zeros({777});
  ops::relu2(x.c, y.c);
  ops::relu2(x.g, y.g);
  EXPECT_TRUE(close(y, 1e-6, 0.0));
  Pair dy = pair(randn(777, seed++), {777}), dx = pair(randn(777, seed++), {777}, kBF16);
  ops::relu2_backward(x.c, dy.c, dx.c, true);
  ops::relu2_backward(x.g, dy.g, dx.g, true);
  EXPECT_TRUE(close(dx, rtol_for(kBF16, 1e-6), 1e-6));
}

// relu^2 on 100003 elements (not a multiple of the block size), f32: one or two roundings on
// both sides in the same order; 2*r*dy may be FMA-free on both, so rtol 1e-6 (a few ulp) and no
// atol; dx += ...: an FMA on the GPU may round once where the CPU rounds twice, atol 1e-6 for
// cancellation. bf16: fp32 math on bf16-rounded inputs against the CPU's unrounded fp32
// results, one rounding per output (kBf16Rtol).
void Relu2OddLengthMatchesCpu() {
  constexpr int64_t kN = 100003;
  {
    SCOPED_TRACE("f32");
    Pair x = pair(randn(kN, 21), {kN}), dy = pair(randn(kN, 22), {kN});
    Pair y = zeros({kN}), dx = zeros({kN}), dxa = pair(randn(kN, 23), {kN});
    for (int dev = 0; dev < 2; ++dev) {
      const Tensor &X = dev ? x.g : x.c, &DY = dev ? dy.g : dy.c;
      ops::relu2(X, dev ? y.g : y.c);
      ops::relu2_backward(X, DY, dev ? dx.g : dx.c, false);
      ops::relu2_backward(X, DY, dev ? dxa.g : dxa.c, true);
    }
    EXPECT_TRUE(close(y, 1e-6, 0.0));
    EXPECT_TRUE(close(dx, 1e-6, 0.0));
    EXPECT_TRUE(close(dxa, 1e-6, 1e-6));
  }
  {
    SCOPED_TRACE("bf16");
    const Shape s = {kN};
    Pair x = bf16_on_gpu(rounded_bf16(randn(kN, 24)), s);
    Pair dy = bf16_on_gpu(rounded_bf16(randn(kN, 25)), s);
    Pair dxa = bf16_on_gpu(rounded_bf16(randn(kN, 26)), s);
    Pair y = {Tensor::zeros(s, kF32, kCPU), Tensor::zeros(s, kBF16, kGPU)};
    Pair dx = {Tensor::zeros(s, kF32, kCPU), Tensor::zeros(s, kBF16, kGPU)};
    for (int dev = 0; dev < 2; ++dev) {
      const Tensor &X = dev ? x.g : x.c, &DY = dev ? dy.g : dy.c;
      ops::relu2(X, dev ? y.g : y.c);
      ops::relu2_backward(X, DY, dev ? dx.g : dx.c, false);
      ops::relu2_backward(X, DY, dev ? dxa.g : dxa.c, true);
    }
    EXPECT_TRUE(close(y, kBf16Rtol, 0.0));
    EXPECT_TRUE(close(dx, kBf16Rtol, 0.0));
    EXPECT_TRUE(close(dxa, kBf16Rtol, 1e-6));
  }
}

// relu (--mlp-act relu) and its derivative: copies and selects, exact on both sides in f32; bf16
// outputs round the same fp32 value once (kBf16Rtol covers the CPU's unrounded reference).
void ReluMatchesCpu() {
  uint64_t seed = 130;
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    const double rtol = dt == kF32 ? 0.0 : kBf16Rtol;
    Pair x = pair(randn(10007, seed++), {10007}, dt), y = zeros({10007}, dt);
    ops::relu(x.c, y.c);
    ops::relu(x.g, y.g);
    EXPECT_TRUE(close(y, rtol, 0.0));
    for (bool acc : {false, true}) {
      Pair dy = pair(randn(10007, seed++), {10007}, dt);
      Pair dx = pair(randn(10007, seed++), {10007}, dt);
      ops::relu_backward(x.c, dy.c, dx.c, acc);
      ops::relu_backward(x.g, dy.g, dx.g, acc);
      EXPECT_TRUE(close(dx, dt == kF32 ? 1e-7 : kBf16Rtol, 1e-6)) << "acc " << acc;
    }
  }
}

// The gather copies (or rounds, for bf16 out, identically) table rows: exact. The scatter-add
// adds each element's contributions in id order on both sides (fp32 adds only): exact.
void EmbeddingMatchesCpu() {
  const int64_t rows = 50, C = 24, row_begin = 100;
  std::vector<int32_t> idv;
  for (int i = 0; i < 64; ++i) idv.push_back(int32_t(80 + (i * 37) % 90));  // owned and not
  idv[5] = idv[6] = idv[7] = 120;                                           // repeats
  const Pair id = ids(idv);
  const int64_t N = int64_t(idv.size());
  Pair table = pair(randn(rows * C, 120), {rows, C});
  uint64_t seed = 121;
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    Pair out = pair(randn(N * C, seed++), {N, C}, dt);  // overwritten, zeros where not owned
    ops::embedding(table.c, row_begin, id.c, out.c);
    ops::embedding(table.g, row_begin, id.g, out.g);
    EXPECT_TRUE(same(out));
    Pair dout = pair(randn(N * C, seed++), {N, C}, dt);
    Pair dtable = pair(randn(rows * C, seed++), {rows, C});
    ops::embedding_backward(dout.c, id.c, row_begin, dtable.c);
    ops::embedding_backward(dout.g, id.g, row_begin, dtable.g);
    EXPECT_TRUE(same(dtable));
  }
}

// A local table holding rows [100, 250) of a vocabulary of 400; 513 ids inside and outside it,
// one row hit 40 times, the first and last owned rows and the two just outside. Gather is a
// copy: exact for f32; bf16 output is the single RN rounding of the fp32 row, bit for bit.
// Scatter-add: every element adds its terms in id order on both sides (one owner thread per
// element, no atomics): the fp32 results are equal bit for bit, with f32 dout and with bf16
// dout (the CPU sums the same bf16-rounded terms in fp32).
void EmbeddingShardEdgesMatchCpuExactly() {
  constexpr int64_t kVocab = 400, kRowBegin = 100, kRows = 150, C = 72, N = 513;
  std::vector<int32_t> idv(N);
  {
    std::mt19937 g(9);
    std::uniform_int_distribution<int32_t> d(0, kVocab - 1);
    for (auto& v : idv) v = d(g);
  }
  for (int i = 0; i < 40; ++i) idv[i] = kRowBegin + 3;
  idv[40] = kRowBegin;
  idv[41] = kRowBegin + kRows - 1;
  idv[42] = kRowBegin + kRows;  // just outside
  idv[43] = kRowBegin - 1;
  const Pair id = ids(idv);
  const Pair table = pair(randn(kRows * C, 41), {kRows, C});
  Pair out = zeros({N, C});
  const Tensor out_b = Tensor::zeros({N, C}, kBF16, kGPU);
  ops::embedding(table.c, kRowBegin, id.c, out.c);
  ops::embedding(table.g, kRowBegin, id.g, out.g);
  ops::embedding(table.g, kRowBegin, id.g, out_b);
  EXPECT_EQ(vals(out.g), vals(out.c));
  EXPECT_EQ(bf16_bits_of(out_b), to_bf16(vals(out.c)));
  const auto dtab0 = randn(kRows * C, 42);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 dout" : "f32 dout");
    auto dout = randn(N * C, 43);
    if (bf16) dout = rounded_bf16(dout);
    const Pair d = bf16 ? bf16_on_gpu(dout, {N, C}) : pair(dout, {N, C});
    Pair dtab = pair(dtab0, {kRows, C});
    ops::embedding_backward(d.c, id.c, kRowBegin, dtab.c);
    ops::embedding_backward(d.g, id.g, kRowBegin, dtab.g);
    EXPECT_EQ(vals(dtab.g), vals(dtab.c));
  }
}

// Tolerances of tests/gpu/xent_test.cc: tanhf/expf within 2 ulp move z by ~cap * 2.4e-7 ~ 4e-6
// (atol 1e-5 on max and target z) and exp(z - max) by ~4e-6 relative; fp32 row sums in another
// order: rtol 2e-5 on sumexp and dlogits. bf16 logits are the same bf16 values on both sides,
// so the fp32 tolerances hold; bf16 dlogits add one rounding. The combining pieces (rescale,
// finish) and the backward run on identical inputs (the CPU's statistics on both devices).
void CrossEntropyPiecesMatchCpu() {
  const int64_t N = 23, ld = 300, n_valid = 280, col_offset = 500;
  const float cap = 15.0f;
  std::vector<int32_t> tv(N);
  for (int64_t n = 0; n < N; ++n) tv[n] = int32_t((n * 131) % 1200);  // ~1/4 in this slice
  tv[0] = int32_t(col_offset), tv[1] = int32_t(col_offset + n_valid - 1);
  tv[2] = int32_t(col_offset + n_valid);  // a padding column: not a target here
  const Pair t = ids(tv);
  uint64_t seed = 130;
  struct Types {
    DType logits, dlogits;
  };
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kBF16, kF32}, Types{kF32, kBF16}}) {
    SCOPED_TRACE(testing::Message() << name_of(ty.logits) << "->" << name_of(ty.dlogits));
    Pair logits = pair(randn(N * ld, seed++, 8.0f), {N, ld}, ty.logits);
    Pair mx = zeros({N}), se = zeros({N}), tz = zeros({N});
    for (int dev = 0; dev < 2; ++dev) {
      XentArgs x;
      x.logits = dev ? logits.g : logits.c, x.targets = dev ? t.g : t.c;
      x.n_valid = n_valid, x.col_offset = col_offset, x.cap = cap;
      ops::xent_partial(x, dev ? mx.g : mx.c, dev ? se.g : se.c, dev ? tz.g : tz.c);
    }
    EXPECT_TRUE(close(mx, 0.0, 1e-5));
    EXPECT_TRUE(close(se, 2e-5, 0.0));
    EXPECT_TRUE(close(tz, 0.0, 1e-5));

    // Rescale against a "global" max >= the row max, then finish; identical inputs.
    auto gmax = vals(mx.c);
    for (auto& g : gmax) g += 0.7f;
    Pair gm = pair(gmax, {N});
    Pair se2{se.c.clone(), se.c.to(kGPU)}, mx2{mx.c, mx.c.to(kGPU)}, tz2{tz.c, tz.c.to(kGPU)};
    ops::xent_rescale(se2.c, mx2.c, gm.c);
    ops::xent_rescale(se2.g, mx2.g, gm.g);
    EXPECT_TRUE(close(se2, 1e-6, 0.0));
    Pair lse = zeros({N}), loss = zeros({N});
    const Pair se3{se2.c, se2.c.to(kGPU)};
    ops::xent_finish(gm.c, se3.c, tz2.c, lse.c, loss.c);
    ops::xent_finish(gm.g, se3.g, tz2.g, lse.g, loss.g);
    // lse = max + logf(sumexp): logf within 2 ulp, then one rounding at lse's magnitude (~20,
    // ulp 1.9e-6); loss = lse - target_z inherits that absolute error even where it is small.
    EXPECT_TRUE(close(lse, 1e-6, 1e-6));
    EXPECT_TRUE(close(loss, 1e-6, 1e-5));

    // Backward with the CPU's lse on both devices.
    const Pair lse_in{lse.c, lse.c.to(kGPU)};
    Pair dl = pair(randn(N * ld, seed++), {N, ld}, ty.dlogits);  // overwritten
    for (int dev = 0; dev < 2; ++dev) {
      XentArgs x;
      x.logits = dev ? logits.g : logits.c, x.targets = dev ? t.g : t.c;
      x.n_valid = n_valid, x.col_offset = col_offset, x.cap = cap;
      ops::xent_backward(x, dev ? lse_in.g : lse_in.c, 0.37f, dev ? dl.g : dl.c);
    }
    EXPECT_TRUE(close(dl, rtol_for(ty.dlogits, 2e-5), 1e-6));
    const auto got = vals(dl.g);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = n_valid; c < ld; ++c) ASSERT_EQ(got[n * ld + c], 0.0f) << n << "," << c;
  }
}

// The fused loss end (one block a row: an online max and sum, then the gradient) against the
// CPU's op, which does the unfused kernels' arithmetic. The differences are those of
// CrossEntropyPiecesMatchCpu above, composed: z within atol 1e-5 (tanhf), the row sum within
// rtol 2e-5 (expf, another order) moves lse = max + log(sum) by <= 1e-5 + 2e-5 (plus logf's 2
// ulp and one rounding at lse's magnitude ~20, 4e-6): atol 4e-5 on lse; loss = lse - target z
// adds the target's 1e-5: atol 5e-5. p = exp(z - lse) then moves by <= 1e-5 + 4e-5 relative:
// rtol 5e-5 on dlogits (plus one bf16 rounding for bf16 dlogits), atol 1e-6 as there. Same-type
// pairs also run in place (dlogits = the logits), the training loss end's use.
void CrossEntropyLossGradMatchesCpu() {
  const int64_t N = 23, ld = 300, n_valid = 280, col_offset = 0;
  const float cap = 15.0f, scale = 0.37f;
  std::vector<int32_t> tv(N);
  for (int64_t n = 0; n < N; ++n) tv[n] = int32_t((n * 131) % 300);
  tv[0] = 0, tv[1] = int32_t(n_valid - 1);
  tv[2] = int32_t(n_valid);  // a padding column: no target column in this row
  tv[3] = 400;               // outside the slice
  const Pair t = ids(tv);
  uint64_t seed = 150;
  struct Types {
    DType logits, dlogits;
  };
  for (Types ty : {Types{kF32, kF32}, Types{kBF16, kBF16}, Types{kBF16, kF32}, Types{kF32, kBF16}}) {
    for (bool in_place : {false, true}) {
      if (in_place && ty.logits != ty.dlogits) continue;
      SCOPED_TRACE(testing::Message() << name_of(ty.logits) << "->" << name_of(ty.dlogits)
                                      << (in_place ? " in place" : ""));
      Pair logits = pair(randn(N * ld, seed++, 8.0f), {N, ld}, ty.logits);
      Pair dl = in_place ? logits : pair(randn(N * ld, seed++), {N, ld}, ty.dlogits);
      Pair lse = zeros({N}), loss = zeros({N});
      for (int dev = 0; dev < 2; ++dev) {
        XentArgs x;
        x.logits = dev ? logits.g : logits.c, x.targets = dev ? t.g : t.c;
        x.n_valid = n_valid, x.col_offset = col_offset, x.cap = cap;
        ops::xent_loss_grad(x, scale, dev ? lse.g : lse.c, dev ? loss.g : loss.c,
                            dev ? dl.g : dl.c);
      }
      EXPECT_TRUE(close(lse, 0.0, 4e-5));
      EXPECT_TRUE(close(loss, 0.0, 5e-5));
      EXPECT_TRUE(close(dl, rtol_for(ty.dlogits, 5e-5), 1e-6));
      const auto got = vals(dl.g);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = n_valid; c < ld; ++c) ASSERT_EQ(got[n * ld + c], 0.0f) << n << "," << c;
    }
  }
}

// Gate pieces. sigmoid: expf within 2 ulp: 1e-6. gated mix: one fp32 multiply-add: 1e-6.
// Gate gradient: a row sum in fp32 (GPU) vs fp64 (CPU): 1e-5 relative plus 1e-5 * max.
// gate_sigmoid_backward evaluates the CPU's exact expression (fp32 quotient, fp64 products):
// equal.
void GateOpsMatchCpu() {
  const int64_t G = 40, hd = 16;
  const float gate_scale = 2.0f;
  Pair z = pair(randn(G, 140, 2.0f), {G});
  ops::gate_sigmoid(z.c, gate_scale);
  ops::gate_sigmoid(z.g, gate_scale);
  EXPECT_TRUE(close(z, 1e-6, 0.0));
  const Pair gate{z.c, z.c.to(kGPU)};  // identical gates from here on
  uint64_t seed = 141;
  struct Types {
    DType ctx, emb, v;
  };
  for (Types ty : {Types{kF32, kF32, kF32}, Types{kBF16, kBF16, kBF16}, Types{kF32, kBF16, kBF16}}) {
    SCOPED_TRACE(testing::Message() << name_of(ty.ctx) << "," << name_of(ty.emb) << "->"
                                    << name_of(ty.v));
    Pair ctx = pair(randn(G * hd, seed++), {G, hd}, ty.ctx);
    Pair emb = pair(randn(G * hd, seed++), {G, hd}, ty.emb);
    Pair v = zeros({G, hd}, ty.v);
    ops::gated_mix(ctx.c, emb.c, gate.c, v.c);
    ops::gated_mix(ctx.g, emb.g, gate.g, v.g);
    EXPECT_TRUE(close(v, rtol_for(ty.v, 1e-6), 1e-6));
    Pair dv = pair(randn(G * hd, seed++), {G, hd}, ty.v);
    Pair demb = zeros({G, hd}, ty.emb), dgate = zeros({G});
    ops::gated_mix_backward(dv.c, emb.c, gate.c, demb.c, dgate.c);
    ops::gated_mix_backward(dv.g, emb.g, gate.g, demb.g, dgate.g);
    EXPECT_TRUE(close(demb, rtol_for(ty.emb, 1e-6), 0.0));
    EXPECT_TRUE(close(dgate, 1e-5, 1e-5 * max_abs(vals(dgate.c))));
  }
  const Pair dgate = pair(randn(G, seed++), {G});
  for (DType dt : {kF32, kBF16}) {
    Pair dz = zeros({G}, dt);
    ops::gate_sigmoid_backward(gate.c, dgate.c, gate_scale, dz.c);
    ops::gate_sigmoid_backward(gate.g, dgate.g, gate_scale, dz.g);
    EXPECT_TRUE(same(dz)) << name_of(dt);
  }
}

// ------------------------------------------------------------------------------------------------
// Optimizer updates

void AdamWMatchesCpu() {
  const int64_t n = 20011;
  Pair p = pair(randn(n, 150), {n}), m = zeros({n}), v = zeros({n});
  for (int64_t t = 1; t <= 3; ++t) {
    SCOPED_TRACE(testing::Message() << "t=" << t);
    const Pair g = pair(randn(n, 150 + uint64_t(t), 0.1f), {n});
    AdamWStepArgs a;
    a.lr = 0.01 * double(t), a.beta1 = 0.8, a.beta2 = 0.95, a.weight_decay = 0.1, a.eps = 1e-10;
    a.t = t;
    ops::adamw_update(p.c, g.c, m.c, v.c, a);
    ops::adamw_update(p.g, g.g, m.g, v.g, a);
    // m = beta1 m + (1 - beta1) g cancels: its error is absolute on the scale of the terms
    // (one fp32 ulp of max |m|, where a GPU contracts into FMA; 1.7e-9 on an H200 at |m| 2e-4).
    EXPECT_TRUE(close(m, 1e-6, 1e-6 * max_abs(vals(m.c))));
    EXPECT_TRUE(close(v, 1e-6, 1e-12));
    EXPECT_TRUE(close(p, 1e-6, 1e-7));
  }
}

// Three AdamW steps with weight decay from random (not zero) states, the lr changing each step:
// the same fp32 operations in the same order; the GPU may contract a*b + c into one FMA, ~1 ulp
// per operation compounded over 3 steps: rtol 1e-6 on p (|p| ~ 1) and 1e-5 on m, v (which can
// cancel), with a tiny atol for states near zero.
void AdamWThreeStepsFromRandomStates() {
  const int64_t n = 50001;
  const double lr0 = 0.01, beta1 = 0.8, beta2 = 0.95, wd = 0.1, eps = 1e-10;
  Pair p = pair(randn(n, 71), {n}), m = pair(randn(n, 72, 0.1f), {n});
  Pair v = pair(uniform(n, 73, 0.0f, 0.02f), {n});
  for (int64_t t = 1; t <= 3; ++t) {
    const Pair g = pair(randn(n, 80 + t, 0.1f), {n});
    AdamWStepArgs a;
    a.lr = lr0 * (1.0 - 0.1 * t), a.beta1 = beta1, a.beta2 = beta2, a.weight_decay = wd;
    a.eps = eps, a.t = t;
    ops::adamw_update(p.c, g.c, m.c, v.c, a);
    ops::adamw_update(p.g, g.g, m.g, v.g, a);
  }
  EXPECT_TRUE(close(p, 1e-6, 1e-7));
  EXPECT_TRUE(close(m, 1e-5, 1e-6 * max_abs(vals(m.c))));  // cancels, as above
  EXPECT_TRUE(close(v, 1e-5, 1e-11));
}

// The updates with their step's values in memory (ops::StepValues, what the optimizer and its
// CUDA graph run) on each backend: with guard {1, apply} the by-value update's bits; with a clip
// factor s the bits of the by-value update on gradients scaled by s first (ops::scale_copy, what
// the clip did before it moved into the kernels); with apply 0 nothing written. On the GPU the
// scalars live in device memory and are read when the kernels run.
void StepValueUpdatesAreTheByValueOnes() {
  const int64_t n = 9001;
  AdamWStepArgs a;
  a.lr = 0.013, a.beta1 = 0.8, a.beta2 = 0.95, a.weight_decay = 0.1, a.eps = 1e-10, a.t = 3;
  const double momentum = 0.93, lr = 0.02, wd = 0.4, scale = 1.7;
  const AdamWCoefs ac = adamw_coefs(a);
  const MuonMomentumCoefs mc = muon_momentum_coefs(momentum);
  const MuonApplyCoefs pc = muon_apply_coefs(lr, wd, scale);
  for (Device dev : {kCPU, kGPU}) {
    for (const float clip : {1.0f, 0.37f, -1.0f}) {  // -1: the guard says skip
      SCOPED_TRACE(testing::Message() << (dev == kGPU ? "gpu" : "cpu") << " clip " << clip);
      std::vector<float> sv(kGuardFloats + 12, 0.0f);
      sv[kGuardGradScale] = clip < 0 ? 1.0f : clip;
      sv[kGuardApply] = clip < 0 ? 0.0f : 1.0f;
      std::memcpy(&sv[kGuardFloats], &ac, sizeof ac);
      std::memcpy(&sv[kGuardFloats + 8], &mc, sizeof mc);
      std::memcpy(&sv[kGuardFloats + 10], &pc, sizeof pc);
      const Tensor scalars = Tensor::from_host(sv.data(), {int64_t(sv.size())}, dev);
      auto on = [dev](const std::vector<float>& v) {
        return Tensor::from_host(v.data(), {int64_t(v.size())}, dev);
      };
      const std::vector<float> g0 = randn(n, 190, 0.1f), p0 = randn(n, 191), m0 = randn(n, 192, 0.1f);
      const std::vector<float> v0 = uniform(n, 193, 0.0f, 0.02f), x0 = randn(n, 194);
      // Reference: the by-value ops on gradients the clip scaled in place.
      const Tensor g = on(g0), rp = on(p0), rm = on(m0), rv = on(v0), rbuf = on(m0);
      const Tensor ru = Tensor::zeros({n}, kF32, dev), rq = on(p0), rc = Tensor::zeros({n}, kBF16, dev);
      if (clip > 0) {
        const Tensor gs = g.clone();
        if (clip != 1.0f) ops::scale_copy(gs, gs, clip);
        ops::adamw_update(rp, gs, rm, rv, a);
        ops::muon_momentum(gs, rbuf, ru, momentum);
        ops::muon_apply(rq, on(x0), lr, wd, scale, true, rc);
      }
      // The same from the scalars.
      const Tensor p = on(p0), m = on(m0), v = on(v0), buf = on(m0), u = Tensor::zeros({n}, kF32, dev);
      const Tensor q = on(p0), c = Tensor::zeros({n}, kBF16, dev);
      ops::adamw_update(p, g, m, v, ops::StepValues{scalars, kGuardFloats});
      ops::muon_momentum(g, buf, u, ops::StepValues{scalars, kGuardFloats + 8});
      ops::muon_apply(q, on(x0), ops::StepValues{scalars, kGuardFloats + 10}, true, c);
      for (const auto& [got, want] : std::vector<std::pair<Tensor, Tensor>>{
               {p, rp}, {m, rm}, {v, rv}, {buf, rbuf}, {u, ru}, {q, rq}})
        EXPECT_EQ(vals(got), vals(want));
      EXPECT_EQ(bf16_bits_of(c), bf16_bits_of(rc));
      EXPECT_EQ(vals(g), g0) << "the gradients are read, never written";
      if (clip < 0) EXPECT_EQ(vals(p), p0) << "a skipped step writes nothing";
    }
  }
}

// The guard formed on the device: its sum of squares is sum_squares_list's over the same tensors
// (the same launches, bit for bit), its clip factor optim/clip.h's rule on that sum's root in
// fp64 (bit for bit), apply 0 exactly when the norm or a loss is not finite; on both backends.
void StepGuardIsTheHostRule() {
  const std::vector<float> a0 = randn(40000, 195), b0 = randn(333, 196, 3.0f), l0 = randn(77, 197);
  for (Device dev : {kCPU, kGPU}) {
    SCOPED_TRACE(dev == kGPU ? "gpu" : "cpu");
    auto on = [dev](const std::vector<float>& v) {
      return Tensor::from_host(v.data(), {int64_t(v.size())}, dev);
    };
    const Tensor a = on(a0), b = on(b0);
    const double sum = ops::sum_squares_list({a, b});
    const double norm = std::sqrt(sum);
    for (double max_norm : {0.0, norm * 2, norm / 3}) {
      for (int bad = 0; bad < 3; ++bad) {  // 0: finite; 1: a NaN loss; 2: an infinite gradient
        SCOPED_TRACE(testing::Message() << "max_norm " << max_norm << " bad " << bad);
        std::vector<float> l = l0;
        if (bad == 1) l[40] = std::nanf("");
        const Tensor losses = on(l);
        const Tensor guard = Tensor::zeros({kGuardFloats + 3}, kF32, dev);
        std::vector<Tensor> grads = {a, b};
        if (bad == 2) grads.push_back(on({1.0f, std::numeric_limits<float>::infinity()}));
        ops::step_guard(grads, losses, max_norm, guard);
        const std::vector<float> gv = vals(guard);
        if (bad != 2) {
          const double got = ops::guard_sum_squares(gv.data());
          EXPECT_EQ(std::memcmp(&got, &sum, sizeof sum), 0) << got << " vs " << sum;
          const double want = max_norm <= 0.0 || !(norm > max_norm) ? 1.0 : max_norm / (norm + 1e-6);
          EXPECT_EQ(gv[kGuardGradScale], static_cast<float>(want));
        }
        EXPECT_EQ(gv[kGuardApply], bad == 0 ? 1.0f : 0.0f);
        EXPECT_EQ(gv[kGuardFloats], 0.0f) << "only the guard is written";
      }
    }
    // No losses at all: the norm alone decides.
    const Tensor guard = Tensor::zeros({kGuardFloats}, kF32, dev);
    ops::step_guard({a}, Tensor(), 0.0, guard);
    EXPECT_EQ(vals(guard)[kGuardApply], 1.0f);
  }
}

void MuonUpdatesMatchCpu() {
  const int64_t n = 9001;
  Pair buf = pair(randn(n, 160), {n});
  for (int step = 0; step < 2; ++step) {
    Pair g = pair(randn(n, 161 + uint64_t(step)), {n}), u = zeros({n});
    ops::muon_momentum(g.c, buf.c, u.c, 0.95);
    ops::muon_momentum(g.g, buf.g, u.g, 0.95);
    EXPECT_TRUE(close(buf, 1e-6, 1e-7));
    EXPECT_TRUE(close(u, 1e-6, 1e-7));
    ops::muon_momentum(g.c, buf.c, g.c, 0.9);  // u aliasing g
    ops::muon_momentum(g.g, buf.g, g.g, 0.9);
    EXPECT_TRUE(close(g, 1e-6, 1e-7));
  }
  Pair p = pair(randn(n, 170), {n});
  const Pair x = pair(randn(n, 171), {n});
  ops::muon_apply(p.c, x.c, 0.02, 0.01, 1.7);
  ops::muon_apply(p.g, x.g, 0.02, 0.01, 1.7);
  EXPECT_TRUE(close(p, 1e-6, 1e-7));
  // nanochat's cautious decay (a large decay, so a wrong mask is far outside the tolerance)
  ops::muon_apply(p.c, x.c, 0.02, 5.0, 1.7, true);
  ops::muon_apply(p.g, x.g, 0.02, 5.0, 1.7, true);
  EXPECT_TRUE(close(p, 1e-6, 1e-7));
  // A bf16 update (the distributed optimizer's bf16 broadcasts) is read as its float: the same
  // result as applying its f32 widening, on both backends, plain and cautious.
  const Pair xb = pair(randn(n, 172), {n}, DType::kBF16);
  for (bool cautious : {false, true}) {
    Pair q = pair(randn(n, 173), {n});
    const Tensor q0 = q.c.clone();
    ops::muon_apply(q.c, xb.c, 0.02, 0.5, 1.7, cautious);
    ops::muon_apply(q.g, xb.g, 0.02, 0.5, 1.7, cautious);
    EXPECT_TRUE(close(q, 1e-6, 1e-7)) << "cautious " << cautious;
    const Tensor wide = xb.c.to(Device::kCPU, DType::kF32);
    ops::muon_apply(q0, wide, 0.02, 0.5, 1.7, cautious);
    EXPECT_EQ(q0.to_host_f32(), q.c.to_host_f32()) << "cautious " << cautious;
  }
  // With the compute copy written in the same pass: on each backend the copy holds exactly the
  // bits ops::copy makes of the new p, and p is what the apply without a copy makes.
  for (bool cautious : {false, true}) {
    Pair q = pair(randn(n, 174), {n}), c = zeros({n}, DType::kBF16);
    const Tensor plain_c = q.c.clone(), plain_g = q.g.clone();
    ops::muon_apply(q.c, xb.c, 0.02, 0.5, 1.7, cautious, c.c);
    ops::muon_apply(q.g, xb.g, 0.02, 0.5, 1.7, cautious, c.g);
    ops::muon_apply(plain_c, xb.c, 0.02, 0.5, 1.7, cautious);
    ops::muon_apply(plain_g, xb.g, 0.02, 0.5, 1.7, cautious);
    EXPECT_EQ(q.c.to_host_f32(), plain_c.to_host_f32());
    EXPECT_EQ(q.g.to_host_f32(), plain_g.to_host_f32());
    for (const Tensor& dev : {q.c, q.g}) {
      const Tensor& got = dev.device() == kGPU ? c.g : c.c;
      const Tensor want = Tensor::zeros({n}, DType::kBF16, dev.device());
      ops::copy(want, dev);
      EXPECT_EQ(bf16_bits_of(got), bf16_bits_of(want)) << "cautious " << cautious;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// The table

struct OpRow {
  const char* op;
  void (*check)();
};
void PrintTo(const OpRow& r, std::ostream* os) { *os << r.op; }

const OpRow kOps[] = {
    {"gemm", GemmMatchesCpu},
    {"gemm_addend", GemmAddendIsCopyThenGemm},
    {"gemm_batched", GemmBatchedIsEachProblem},
    {"normalize_frobenius_into", NormalizeIntoIsCopyNormalizeCast},
    {"normalize_frobenius_segments", NormalizeSegmentsIsEachSegment},
    {"cast", CastMatchesCpuExactly},
    {"cast_round_trip_bits", CastRoundTripBitExact},
    {"axpy_scale_copy", AxpyAndScaleCopyMatchCpu},
    {"dot_sum_squares", DotAndSumSquaresMatchCpu},
    {"device_coefficient_ops", DeviceCoefficientOpsMatchCpu},
    {"add_scalar", AddScalarMatchesCpuExactly},
    {"transpose", TransposeMatchesCpuExactly},
    {"rmsnorm", RmsNormMatchesCpu},
    {"add_rmsnorm", AddRmsNormMatchesCpu},
    {"rmsnorm_backward_sum", RmsNormBackwardSumMatchesCpu},
    {"rope", RopeMatchesCpu},
    {"rope_rmsnorm", RopeRmsNormMatchesCpu},
    {"rope_rmsnorm_backward", RopeRmsNormBackwardMatchesCpu},
    {"attention", AttentionMatchesCpu},
    {"attention_backward_qk_norm", AttentionBackwardQkNormMatchesCpu},
    {"relu2", Relu2MatchesCpu},
    {"relu2_odd_length", Relu2OddLengthMatchesCpu},
    {"relu", ReluMatchesCpu},
    {"embedding", EmbeddingMatchesCpu},
    {"embedding_shard_edges", EmbeddingShardEdgesMatchCpuExactly},
    {"xent", CrossEntropyPiecesMatchCpu},
    {"xent_loss_grad", CrossEntropyLossGradMatchesCpu},
    {"value_gate", GateOpsMatchCpu},
    {"adamw", AdamWMatchesCpu},
    {"adamw_random_states", AdamWThreeStepsFromRandomStates},
    {"muon", MuonUpdatesMatchCpu},
    {"step_value_updates", StepValueUpdatesAreTheByValueOnes},
    {"step_guard", StepGuardIsTheHostRule},
};

// The CUDA backend registered as the device backend for each row, removed afterwards.
class OpParity : public WithCudaBackend<::testing::TestWithParam<OpRow>> {};

TEST_P(OpParity, CpuAndCudaAgree) { GetParam().check(); }

INSTANTIATE_TEST_SUITE_P(EveryOp, OpParity, ::testing::ValuesIn(kOps),
                         [](const ::testing::TestParamInfo<OpRow>& i) {
                           return std::string(i.param.op);
                         });

}  // namespace
}  // namespace vt::gputest
