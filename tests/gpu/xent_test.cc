// CUDA soft-capped vocab-parallel cross-entropy against vt::cpu::xent_partial_forward /
// xent_backward on random logits of one vocabulary slice (column offset, padding columns,
// targets inside and outside the slice). fp32 logits.
#include "kernels/xent.cuh"

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

constexpr int64_t N = 37, ld = 530, n_valid = 500, col_offset = 1000;
constexpr float kCap = 15.0f;

std::vector<int32_t> make_targets() {
  std::mt19937 g(5);
  std::uniform_int_distribution<int32_t> d(0, 2999);  // global vocab 3000: ~1/6 in this slice
  std::vector<int32_t> t(N);
  for (auto& v : t) v = d(g);
  t[0] = col_offset;                // first local column
  t[1] = col_offset + n_valid - 1;  // last valid column
  t[2] = col_offset + n_valid;      // a padding column: not a target here
  return t;
}

// Tolerances: GPU tanhf/expf are within 2 ulp (~2.4e-7 relative), so z = cap*tanh differs by
// ~cap * 2.4e-7 ~ 4e-6 absolute, which moves exp(z - max) by ~4e-6 relative; fp32 sums over 500
// columns in another order add ~1e-5 relative. Hence rtol 2e-5 on sums, atol 1e-5 on z values.
TEST(GpuXent, PartialForwardAndBackwardMatchCpu) {
  VT_SKIP_WITHOUT_CUDA();
  auto logits = randn(N * ld, 31, 8.0f);  // std 8 against cap 15: the cap matters
  auto targets = make_targets();
  auto dloss = uniform(N, 32, 0.5f, 1.5f);
  std::vector<float> mx(N), se(N), tz(N);
  cpu::xent_partial_forward<float>(logits.data(), N, ld, n_valid, col_offset, targets.data(),
                                   kCap, mx.data(), se.data(), tz.data());
  std::vector<float> lse(N);
  for (int64_t n = 0; n < N; ++n) lse[n] = mx[n] + std::log(se[n]);
  std::vector<float> dl(N * ld);
  cpu::xent_backward<float>(logits.data(), N, ld, n_valid, col_offset, targets.data(), kCap,
                            lse.data(), dloss.data(), dl.data());

  DeviceBuffer<float> dL(logits), dMX(N), dSE(N), dTZ(N), dLSE(lse), dDLOSS(dloss), dDL(N * ld);
  DeviceBuffer<int32_t> dT(targets);
  cuda::xent_partial_forward(dL.get(), N, ld, n_valid, col_offset, dT.get(), kCap, dMX.get(),
                             dSE.get(), dTZ.get(), nullptr);
  cuda::xent_backward(dL.get(), N, ld, n_valid, col_offset, dT.get(), kCap, dLSE.get(),
                      dDLOSS.get(), dDL.get(), nullptr);
  EXPECT_TRUE(all_close(dMX.download(), mx, 0.0, 1e-5));
  EXPECT_TRUE(all_close(dSE.download(), se, 2e-5, 0.0));
  EXPECT_TRUE(all_close(dTZ.download(), tz, 0.0, 1e-5));
  // dlogits = g (p - [target]) (1 - th^2): p moves by ~1e-5 relative; (1 - th^2) loses up to
  // ~2.4e-7 absolute when th is near 1, times g <= 1.5: atol 1e-6.
  auto got = dDL.download();
  EXPECT_TRUE(all_close(got, dl, 2e-5, 1e-6));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = n_valid; c < ld; ++c) ASSERT_EQ(got[n * ld + c], 0.0f) << n << "," << c;
}

}  // namespace
}  // namespace vt::gputest
