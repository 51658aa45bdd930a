// cuBLASLt GEMM wrapper (src/core/cuda_gemm.cc) against vt::cpu::gemm (cblas) for the four transpose
// combinations, with leading dimensions wider than the rows, alpha != 1 and beta != 0.
// Skips without a CUDA device.
//
// Tolerances: the wrapper asks for CUBLAS_COMPUTE_32F (no TF32), so fp32 results differ from
// cblas only by summation order: |err| <= 2 K eps32 * (|alpha| |A||B| + |beta| |C0|) elementwise
// (the standard dot-product error bound, with a factor 2 for both sides' errors). bf16 inputs are
// exact in fp32 products, so bf16 -> fp32 gets the same bound (times 8 for split/reordered
// accumulation); bf16 -> bf16 adds the output rounding 2^-8 |ref|.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"
#include "core/cuda_gemm.h"

namespace {

template <class T>
using DeviceBuffer = vt::gputest::RawDeviceBuffer<T>;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) { return vt::gputest::to_nv_bf16(v); }
std::vector<float> to_f32(const std::vector<__nv_bfloat16>& v) { return vt::gputest::nv_bf16_to_f32(v); }

struct Problem {
  bool ta, tb;
  int64_t M = 37, N = 53, K = 29;
  int64_t lda, ldb, ldc;
  float alpha = 0.7f, beta = 0.3f;
  std::vector<float> A, B, C0;
  Problem(bool ta_, bool tb_, uint32_t seed) : ta(ta_), tb(tb_) {
    lda = (ta ? M : K) + 3;
    ldb = (tb ? K : N) + 5;
    ldc = N + 2;
    A = random_vec(size_t((ta ? K : M) * lda), seed);
    B = random_vec(size_t((tb ? N : K) * ldb), seed + 1);
    C0 = random_vec(size_t(M * ldc), seed + 2);
  }
  void round_to_bf16() {
    A = to_f32(to_bf16(A));
    B = to_f32(to_bf16(B));
    C0 = to_f32(to_bf16(C0));
  }
  std::vector<float> reference() const {
    std::vector<float> C = C0;
    vt::cpu::gemm<float>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(),
                         ldc);
    return C;
  }
  // |alpha| |op(A)| |op(B)| + |beta| |C0|: the scale of the rounding error of each element.
  std::vector<float> magnitude() const {
    std::vector<float> a(A.size()), b(B.size()), c(C0.size());
    for (size_t i = 0; i < A.size(); ++i) a[i] = std::fabs(A[i]);
    for (size_t i = 0; i < B.size(); ++i) b[i] = std::fabs(B[i]);
    for (size_t i = 0; i < C0.size(); ++i) c[i] = std::fabs(C0[i]);
    vt::cpu::gemm<float>(ta, tb, M, N, K, std::fabs(alpha), a.data(), lda, b.data(), ldb,
                         std::fabs(beta), c.data(), ldc);
    return c;
  }
  // Columns past N of each C row (ldc padding) must stay as they were.
  void expect_close(const std::vector<float>& got, double bound_factor, double out_rel) const {
    const auto ref = reference(), mag = magnitude();
    const double eps = std::numeric_limits<float>::epsilon();
    int bad = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const size_t x = size_t(i * ldc + j);
        const double want = j < N ? ref[x] : C0[x];
        const double tol =
            j < N ? bound_factor * 2 * K * eps * mag[x] + out_rel * std::fabs(want) : 0.0;
        if (!(std::fabs(got[x] - want) <= tol) && ++bad <= 5)
          ADD_FAILURE() << "C[" << i << "," << j << "] = " << got[x] << ", want " << want
                        << " (tol " << tol << ")";
      }
    EXPECT_EQ(bad, 0);
  }
};

TEST(GpuGemm, Fp32MatchesCblasAllTransposes) {
  VT_SKIP_WITHOUT_CUDA();
  vt::cuda::Gemm gemm;
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      Problem pr(ta, tb, seed += 3);
      DeviceBuffer<float> A(pr.A), B(pr.B), C(pr.C0);
      gemm(ta, tb, pr.M, pr.N, pr.K, pr.alpha, A.p, pr.lda, B.p, pr.ldb, pr.beta, C.p, pr.ldc,
           nullptr);
      VT_CUDA_CHECK(cudaDeviceSynchronize());
      pr.expect_close(C.get(), 1.0, 0.0);
    }
}

TEST(GpuGemm, Bf16ToFp32MatchesCblasAllTransposes) {
  VT_SKIP_WITHOUT_CUDA();
  vt::cuda::Gemm gemm;
  uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      Problem pr(ta, tb, seed += 3);
      pr.round_to_bf16();
      DeviceBuffer<__nv_bfloat16> A(to_bf16(pr.A)), B(to_bf16(pr.B));
      DeviceBuffer<float> C(pr.C0);
      gemm(ta, tb, pr.M, pr.N, pr.K, pr.alpha, A.p, pr.lda, B.p, pr.ldb, pr.beta, C.p, pr.ldc,
           nullptr);
      VT_CUDA_CHECK(cudaDeviceSynchronize());
      pr.expect_close(C.get(), 8.0, 0.0);
    }
}

TEST(GpuGemm, Bf16ToBf16MatchesCblasAllTransposes) {
  VT_SKIP_WITHOUT_CUDA();
  vt::cuda::Gemm gemm;
  uint32_t seed = 200;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      Problem pr(ta, tb, seed += 3);
      pr.round_to_bf16();
      DeviceBuffer<__nv_bfloat16> A(to_bf16(pr.A)), B(to_bf16(pr.B)), C(to_bf16(pr.C0));
      gemm(ta, tb, pr.M, pr.N, pr.K, pr.alpha, A.p, pr.lda, B.p, pr.ldb, pr.beta, C.p, pr.ldc,
           nullptr);
      VT_CUDA_CHECK(cudaDeviceSynchronize());
      pr.expect_close(to_f32(C.get()), 8.0, std::ldexp(1.0, -8));
    }
}

// The plan cache: a second call of a shape (a hit) computes exactly what the first (a miss)
// did, for two shapes interleaved; a pointer of lower alignment is another key (a new plan whose
// algorithm may assume only that alignment), still correct.
TEST(GpuGemm, CachedPlansGiveTheSameResults) {
  VT_SKIP_WITHOUT_CUDA();
  vt::cuda::Gemm gemm;
  const Problem p1(false, true, 301), p2(true, false, 302);  // two keys (transposes, ld's)
  DeviceBuffer<float> A1(p1.A), B1(p1.B), A2(p2.A), B2(p2.B);
  auto run = [&](const Problem& p, const DeviceBuffer<float>& A, const DeviceBuffer<float>& B) {
    DeviceBuffer<float> C(p.C0);
    gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.p, p.lda, B.p, p.ldb, p.beta, C.p, p.ldc, nullptr);
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    return C.get();
  };
  const auto c1_miss = run(p1, A1, B1), c2_miss = run(p2, A2, B2);
  EXPECT_EQ(gemm.misses(), 2u);
  EXPECT_EQ(gemm.hits(), 0u);
  const auto c1_hit = run(p1, A1, B1), c2_hit = run(p2, A2, B2);
  EXPECT_EQ(gemm.misses(), 2u);
  EXPECT_EQ(gemm.hits(), 2u);
  EXPECT_EQ(gemm.plans(), 2u);
  EXPECT_EQ(c1_hit, c1_miss);
  EXPECT_EQ(c2_hit, c2_miss);
  p1.expect_close(c1_hit, 1.0, 0.0);
  p2.expect_close(c2_hit, 1.0, 0.0);
  // p1's shape with B one float past an aligned address: only the alignment differs, and that is
  // another key (a plan whose algorithm may assume only 4-byte alignment).
  const Problem p3(false, true, 303);
  std::vector<float> b_off(p3.B.size() + 1, 0.0f);
  std::copy(p3.B.begin(), p3.B.end(), b_off.begin() + 1);
  DeviceBuffer<float> A3(p3.A), B3(b_off), C3(p3.C0);
  gemm(false, true, p3.M, p3.N, p3.K, p3.alpha, A3.p, p3.lda, B3.p + 1, p3.ldb, p3.beta, C3.p,
       p3.ldc, nullptr);
  VT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(gemm.misses(), 3u);
  EXPECT_EQ(gemm.plans(), 3u);
  p3.expect_close(C3.get(), 1.0, 0.0);
}

}  // namespace
