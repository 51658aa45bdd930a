// The FP8 GEMM (ops::gemm with GemmArgs::fp8_a / fp8_b, core/ops/gemm_fp8.cc) on the CUDA backend
// against the CPU backend's fake quantization, for the four transpose combinations, f32 and bf16
// operands, f32 and bf16 outputs, beta != 0, an addend, and the three cuBLASLt FP8 format pairs.
// Skips without a CUDA device.
//
// Tolerance. Both sides multiply the same FP8 values (the CPU's rounding is core/fp8.h, the
// GPU's is cuda_fp8.h's cvt.rn.satfinite: fp8_test checks they agree on every input class) with
// the same power-of-two scales, products exact in fp32. On the CUDA emulation the cuBLASLt
// stand-in calls the same OpenBLAS sgemm in the same layout as the CPU: equal bit for bit. On a
// GPU the sums are taken in another order, and Hopper's FP8 tensor cores keep fewer accumulator
// bits than fp32 between cuBLASLt's promotions (DeepSeek-V3 report: about 14 bits), so
// |gpu - cpu| <= K * 2^-13 * |alpha'| * sum_k |qa_ik qb_jk| + (bf16 C: 2^-8 |cpu|), alpha' the
// factor with both dequantization scales: to be confirmed in a GPU window.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend_pair.h"
#include "core/fp8.h"
#include "core/ops/gemm.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

bool emulated_device() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return false;
  return std::string(p.name).find("emulation") != std::string::npos;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Case {
  bool ta, tb;
  DType ab, c;
  Fp8Format fa, fb;
  bool addend;
  // 0: 40 x 24 x 48 with padded leading dimensions (unaligned rows: the scalar paths); else
  // contiguous M x N x K over several 64 x 64 tiles of the transposing kernel, 16-byte accesses
  // (N = 100 leaves 4-element row tails).
  int64_t M = 0, N = 0, K = 0;
};

std::string name(const Case& k) {
  return std::string(k.ta ? "T" : "N") + (k.tb ? "T" : "N") + "_" + dtype_name(k.ab) + "_" +
         dtype_name(k.c) + "_" + fp8_format_name(k.fa) + "x" + fp8_format_name(k.fb) +
         (k.addend ? "_addend" : "") +
         (k.M ? "_" + std::to_string(k.M) + "x" + std::to_string(k.N) + "x" + std::to_string(k.K)
              : "");
}

class Fp8Gemm : public WithCudaBackend<::testing::TestWithParam<Case>> {};

TEST_P(Fp8Gemm, CudaMatchesCpuFakeQuantization) {
  const Case k = GetParam();
  const int64_t M = k.M ? k.M : 40, N = k.M ? k.N : 24, K = k.M ? k.K : 48, pad = k.M ? 0 : 1;
  const int64_t lda = (k.ta ? M : K) + 3 * pad, ldb = (k.tb ? K : N) + 5 * pad, ldc = N + 2 * pad;
  const int64_t a_rows = k.ta ? K : M, b_rows = k.tb ? N : K;
  // Operands of different magnitudes, so the scales differ from 1 and from each other.
  std::vector<float> a = random_vec(size_t(a_rows * lda), 1, 3.0f);
  std::vector<float> b = random_vec(size_t(b_rows * ldb), 2, 0.005f);
  a[5] = 1e-9f;  // used (row 0, column 5), and below half the smallest subnormal once scaled
  const std::vector<float> c0 = random_vec(size_t(M * ldc), 3, 1.0f);
  Pair A = pair(a, {a_rows, lda}, k.ab), B = pair(b, {b_rows, ldb}, k.ab);
  Pair C = pair(c0, {M, ldc}, k.c), add = pair(random_vec(size_t(M * ldc), 4, 1.0f), {M, ldc}, k.c);
  Fp8GemmStats stats[2];
  for (int side = 0; side < 2; ++side) {
    GemmArgs g;
    g.trans_a = k.ta, g.trans_b = k.tb;
    g.M = M, g.N = N, g.K = K;
    g.alpha = 0.75f, g.beta = 0.5f;
    g.A = side ? A.g : A.c, g.B = side ? B.g : B.c, g.C = side ? C.g : C.c;
    g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    if (k.addend) g.addend = side ? add.g : add.c;
    g.fp8_a = k.fa, g.fp8_b = k.fb;
    g.fp8_stats = &stats[side];
    ops::gemm(g);
  }
  const Fp8GemmStats &cs = stats[0], &gs = stats[1];
  EXPECT_EQ(gs.amax_a, cs.amax_a);
  EXPECT_EQ(gs.amax_b, cs.amax_b);
  EXPECT_EQ(gs.scale_a, cs.scale_a);
  EXPECT_EQ(gs.scale_b, cs.scale_b);
  EXPECT_NE(cs.scale_a, cs.scale_b);
  EXPECT_EQ(gs.saturated_a, cs.saturated_a);
  EXPECT_EQ(gs.saturated_b, cs.saturated_b);
  EXPECT_EQ(cs.saturated_a + cs.saturated_b, 0);  // current power-of-two scaling never saturates
  EXPECT_EQ(gs.underflow_a, cs.underflow_a);
  EXPECT_EQ(gs.underflow_b, cs.underflow_b);
  EXPECT_GE(cs.underflow_a, 1);
  // The M x N matrix (C's padding columns are not the GEMM's: with an addend the host copies the
  // whole addend, the GPU writes the matrix only).
  const std::vector<float> got = vals(C.g), want = vals(C.c);
  if (emulated_device()) {
    int differ = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        if (!(got[i * ldc + j] == want[i * ldc + j]) && ++differ < 5)
          ADD_FAILURE() << "(" << i << "," << j << "): gpu " << got[i * ldc + j] << " cpu "
                        << want[i * ldc + j];
    EXPECT_EQ(differ, 0);
    return;
  }
  // A GPU: the derived bound (see the top), with sum |qa qb| from the CPU's fake quantization.
  const std::vector<float> av = vals(A.c), bv = vals(B.c);
  const double alpha = 0.75 / (double(cs.scale_a) * cs.scale_b);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < K; ++kk) {
        const float x = k.ta ? av[kk * lda + i] : av[i * lda + kk];
        const float y = k.tb ? bv[j * ldb + kk] : bv[kk * ldb + j];
        s += std::fabs(double(fp8_round(x * cs.scale_a, k.fa)) * fp8_round(y * cs.scale_b, k.fb));
      }
      const double w = want[i * ldc + j];
      const double tol = K * std::ldexp(1.0, -13) * alpha * s +
                         (k.c == kBF16 ? std::ldexp(1.0, -8) * std::fabs(w) : 0.0) + 1e-30;
      EXPECT_LE(std::fabs(got[i * ldc + j] - w), tol) << i << "," << j;
    }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      v.push_back({ta, tb, kBF16, kBF16, Fp8Format::kE4M3, Fp8Format::kE4M3, false});
  v.push_back({false, false, kBF16, kF32, Fp8Format::kE5M2, Fp8Format::kE4M3, false});
  v.push_back({false, true, kBF16, kF32, Fp8Format::kE4M3, Fp8Format::kE5M2, true});
  v.push_back({true, false, kF32, kF32, Fp8Format::kE4M3, Fp8Format::kE5M2, false});
  v.push_back({true, true, kF32, kBF16, Fp8Format::kE5M2, Fp8Format::kE4M3, true});
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      v.push_back({ta, tb, kBF16, kBF16, Fp8Format::kE4M3, Fp8Format::kE5M2, false, 200, 136, 272});
  v.push_back({true, false, kF32, kF32, Fp8Format::kE5M2, Fp8Format::kE4M3, false, 136, 100, 208});
  v.push_back({false, true, kBF16, kF32, Fp8Format::kE4M3, Fp8Format::kE4M3, true, 72, 100, 144});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8Gemm, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// A non-finite input makes its scale NaN: the whole product NaN on both sides (for the
// trainer's non-finite policy), never a silently saturated finite value.
class Fp8GemmNonFinite : public WithCudaBackend<::testing::TestWithParam<float>> {};

TEST_P(Fp8GemmNonFinite, PoisonsTheProductOnBothBackends) {
  const int64_t M = 16, N = 16, K = 16;
  std::vector<float> a = random_vec(size_t(M * K), 5, 1.0f), b = random_vec(size_t(K * N), 6, 1.0f);
  a[17] = GetParam();
  Pair A = pair(a, {M, K}, kBF16), B = pair(b, {K, N}, kBF16), C = zeros({M, N}, kBF16);
  for (int side = 0; side < 2; ++side) {
    GemmArgs g;
    g.M = M, g.N = N, g.K = K;
    g.A = side ? A.g : A.c, g.B = side ? B.g : B.c, g.C = side ? C.g : C.c;
    g.lda = K, g.ldb = N, g.ldc = N;
    g.fp8_a = Fp8Format::kE4M3, g.fp8_b = Fp8Format::kE4M3;
    ops::gemm(g);
  }
  for (const Tensor& t : {C.c, C.g})
    for (float v : vals(t)) ASSERT_TRUE(std::isnan(v)) << v;
}

INSTANTIATE_TEST_SUITE_P(Inputs, Fp8GemmNonFinite, ::testing::Values(INFINITY, NAN));

// The linear layers' FP8 GEMMs are counted per kind in ops::fp8_tally_take() (the metrics' fp8
// record), device GEMMs as host ones: the same counts on both backends, zeroed by a take.
class Fp8Tally : public WithCudaBackend<::testing::Test> {};

TEST_F(Fp8Tally, CountsUnderflowPerGemmKindOnBothBackends) {
  const int64_t M = 32, K = 16, N = 16;
  std::vector<float> x = random_vec(size_t(M * K), 7, 1.0f), w = random_vec(size_t(K * N), 8, 1.0f);
  x[3] = 1e-9f, x[40] = -1e-9f;  // underflow E4M3 at x's scale
  w[7] = 1e-9f;                  // and at w's
  for (Device dev : {kCPU, kGPU}) {
    ops::fp8_tally_take();
    Tensor X = host(x, {M, K}, kBF16).to(dev), W = host(w, {K, N}).to(dev);
    Tensor Wb = host(w, {K, N}, kBF16).to(dev);
    Tensor Y = Tensor::zeros({M, N}, kBF16, dev), dW = Tensor::zeros({K, N}, kF32, dev);
    ops::matmul_fp8(X, Wb, Y);
    ops::matmul_fp8(X, Wb, Y, true);
    ops::matmul_dw_fp8(X, Y, dW);
    const vt::Fp8Tally t = ops::fp8_tally_take();
    SCOPED_TRACE(dev == kCPU ? "cpu" : "gpu");
    EXPECT_EQ(t.gemms[0], 2);
    EXPECT_EQ(t.gemms[1], 0);
    EXPECT_EQ(t.gemms[2], 1);
    EXPECT_EQ(t.underflow[0][0], 4);  // x: two elements, two GEMMs
    EXPECT_EQ(t.underflow[0][1], 2);  // w: one element, two GEMMs
    EXPECT_EQ(t.underflow[2][0], 2);  // x^T in the weight gradient
    EXPECT_EQ(t.saturated[0][0] + t.saturated[0][1] + t.saturated[2][0] + t.saturated[2][1], 0);
    const vt::Fp8Tally again = ops::fp8_tally_take();
    EXPECT_EQ(again.gemms[0] + again.gemms[2] + again.underflow[0][0], 0);
  }
}

// The weights' FP8 cache (ops::Fp8WeightCacheScope): inside a scope a weight is quantized once,
// both layouts, and the forward and data-gradient GEMMs reuse it with the values and counts of
// quantizing again; the scope's end drops it, so a weight changed in place (the optimizer) is
// quantized afresh in the next scope.
class Fp8WeightCache : public WithCudaBackend<::testing::Test> {};

TEST_F(Fp8WeightCache, ReusesAWeightsCodesWithinAScopeOnlyAndMatchesUncached) {
  const int64_t M = 64, K = 96, N = 80;
  const std::vector<float> x = random_vec(size_t(M * K), 11, 1.0f),
                           dy = random_vec(size_t(M * N), 12, 0.01f);
  std::vector<float> w = random_vec(size_t(K * N), 13, 0.02f);
  w[9] = 1e-12f;  // underflows at w's scale: counted once per GEMM, cached or not
  for (Device dev : {kCPU, kGPU}) {
    SCOPED_TRACE(dev == kCPU ? "cpu" : "gpu");
    Tensor X = host(x, {M, K}, kBF16).to(dev), dY = host(dy, {M, N}, kBF16).to(dev);
    Tensor W = host(w, {K, N}, kBF16).to(dev);
    // Two forwards and two data gradients, the weight cached (in a scope) or not.
    auto run = [&](bool cached) {
      std::vector<std::vector<float>> out;
      ops::fp8_tally_take();
      for (int rep = 0; rep < 2; ++rep) {
        Tensor Y = Tensor::zeros({M, N}, kBF16, dev), dX = Tensor::zeros({M, K}, kF32, dev);
        ops::matmul_fp8(X, W, Y, false, nullptr, cached);
        ops::matmul_dx_fp8(dY, W, dX, false, nullptr, cached);
        out.push_back(vals(Y));
        out.push_back(vals(dX));
      }
      const vt::Fp8Tally t = ops::fp8_tally_take();
      out.push_back({float(t.gemms[0]), float(t.gemms[1]), float(t.underflow[0][1]),
                     float(t.underflow[1][1])});
      return out;
    };
    const auto plain = run(false);
    EXPECT_EQ(plain.back(), (std::vector<float>{2, 2, 2, 2}));
    const ops::Fp8WeightCacheStats before = ops::fp8_weight_cache_stats();
    std::vector<std::vector<float>> cached;
    {
      ops::Fp8WeightCacheScope scope;
      cached = run(true);
      const ops::Fp8WeightCacheStats in = ops::fp8_weight_cache_stats();
      EXPECT_EQ(in.fills - before.fills, 1);  // both layouts from one quantization
      EXPECT_EQ(in.hits - before.hits, 3);
      EXPECT_GE(in.bytes, 2 * K * N);
    }
    EXPECT_EQ(ops::fp8_weight_cache_stats().bytes, 0);
    ASSERT_EQ(cached.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(cached[i], plain[i]) << i;
    // The weight changes in place (same pointer, as an optimizer step does): a new scope
    // quantizes it again.
    for (auto& v : w) v *= -3.0f;
    W.copy_from(host(w, {K, N}, kBF16).to(dev));
    const auto plain2 = run(false);
    ASSERT_NE(plain2[0], plain[0]);
    {
      ops::Fp8WeightCacheScope scope;
      EXPECT_EQ(run(true), plain2);
    }
  }
}

}  // namespace
}  // namespace vt::gputest
