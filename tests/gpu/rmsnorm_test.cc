// CUDA RMSNorm / QK-norm against vt::cpu::rmsnorm_forward/backward on random inputs, f32 and bf16.
#include "kernels/rmsnorm.cuh"

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

struct Case {
  int64_t rows, C;
  float scale;
};
// Model rows (C = 300, not a multiple of the block) and QK-norm rows (head_dim 64, scale 1.2).
const Case kCases[] = {{67, 300, 1.0f}, {129, 64, 1.2f}, {3, 1, 1.0f}};
constexpr float kEps = 1e-6f;

// fp32: the GPU sums squares in fp32 in tree order, the CPU in double; relative error of the
// sum is ~C * 6e-8 at worst (2e-5 for C = 300) and enters y and rstd with a factor 1/2.
TEST(GpuRmsnorm, ForwardBackwardF32MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  for (const Case& c : kCases) {
    const size_t n = c.rows * c.C;
    auto x = randn(n, 1, 2.0f), dy = randn(n, 2), dx0 = randn(n, 3);
    std::vector<float> y(n), rstd(c.rows), dx(n), dxa = dx0;
    cpu::rmsnorm_forward<float>(x.data(), y.data(), rstd.data(), c.rows, c.C, c.scale, kEps);
    cpu::rmsnorm_backward<float>(x.data(), rstd.data(), dy.data(), dx.data(), c.rows, c.C,
                                 c.scale, false);
    cpu::rmsnorm_backward<float>(x.data(), rstd.data(), dy.data(), dxa.data(), c.rows, c.C,
                                 c.scale, true);
    DeviceBuffer<float> dX(x), dY(n), dR(c.rows), dDY(dy), dDX(n), dDXA(dx0);
    cuda::rmsnorm_forward(dX.get(), dY.get(), dR.get(), c.rows, c.C, c.scale, kEps, nullptr);
    // Backward uses the GPU's own rstd, as training would.
    cuda::rmsnorm_backward(dX.get(), dR.get(), dDY.get(), dDX.get(), c.rows, c.C, c.scale, false,
                           nullptr);
    cuda::rmsnorm_backward(dX.get(), dR.get(), dDY.get(), dDXA.get(), c.rows, c.C, c.scale, true,
                           nullptr);
    EXPECT_TRUE(all_close(dR.download(), rstd, 2e-5, 0.0)) << "rstd C=" << c.C;
    EXPECT_TRUE(all_close(dY.download(), y, 2e-5, 1e-6)) << "y C=" << c.C;
    // dx = a (dy - x b) with a = scale * rstd: cancellation makes errors absolute on the scale
    // of the terms, a |dy|, not of the result (at C = 1, dx cancels to rounding noise).
    const double terms = c.scale * max_abs(rstd) * max_abs(dy);
    EXPECT_TRUE(all_close(dDX.download(), dx, 2e-5, 2e-5 * terms)) << "dx C=" << c.C;
    EXPECT_TRUE(all_close(dDXA.download(), dxa, 2e-5, 2e-5 * (terms + max_abs(dx0))))
        << "dx+= C=" << c.C;
  }
}

// bf16: the CPU reference runs in fp32 on the same bf16-rounded inputs; every bf16 output is one
// rounding of an fp32 value (kBf16Rtol), plus the fp32 differences above.
TEST(GpuRmsnorm, ForwardBackwardBf16MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  for (const Case& c : kCases) {
    const size_t n = c.rows * c.C;
    auto x = rounded_bf16(randn(n, 4, 2.0f)), dy = rounded_bf16(randn(n, 5));
    auto dx0 = rounded_bf16(randn(n, 6));
    std::vector<float> y(n), rstd(c.rows), dx(n), dxa = dx0;
    cpu::rmsnorm_forward<float>(x.data(), y.data(), rstd.data(), c.rows, c.C, c.scale, kEps);
    cpu::rmsnorm_backward<float>(x.data(), rstd.data(), dy.data(), dx.data(), c.rows, c.C,
                                 c.scale, false);
    cpu::rmsnorm_backward<float>(x.data(), rstd.data(), dy.data(), dxa.data(), c.rows, c.C,
                                 c.scale, true);
    DeviceBuffer<__nv_bfloat16> dX(to_bf16(x)), dY(n), dDY(to_bf16(dy)), dDX(n),
        dDXA(to_bf16(dx0));
    DeviceBuffer<float> dR(c.rows);
    cuda::rmsnorm_forward(dX.get(), dY.get(), dR.get(), c.rows, c.C, c.scale, kEps, nullptr);
    cuda::rmsnorm_backward(dX.get(), dR.get(), dDY.get(), dDX.get(), c.rows, c.C, c.scale, false,
                           nullptr);
    cuda::rmsnorm_backward(dX.get(), dR.get(), dDY.get(), dDXA.get(), c.rows, c.C, c.scale, true,
                           nullptr);
    EXPECT_TRUE(all_close(dR.download(), rstd, 2e-5, 0.0)) << "rstd C=" << c.C;
    EXPECT_TRUE(all_close(from_bf16(dY.download<uint16_t>()), y, kBf16Rtol, 1e-6))
        << "y C=" << c.C;
    // dx cancels (to rounding noise at C = 1): errors are absolute on the scale of its terms,
    // as in the fp32 test above.
    const double terms = c.scale * max_abs(rstd) * max_abs(dy);
    EXPECT_TRUE(all_close(from_bf16(dDX.download<uint16_t>()), dx, kBf16Rtol, 2e-5 * terms))
        << "dx C=" << c.C;
    EXPECT_TRUE(all_close(from_bf16(dDXA.download<uint16_t>()), dxa, kBf16Rtol,
                          2e-5 * (terms + max_abs(dx0))))
        << "dx+= C=" << c.C;
  }
}

// y may alias x (in-place QK-norm).
TEST(GpuRmsnorm, InPlaceMatchesOutOfPlace) {
  VT_SKIP_WITHOUT_CUDA();
  const int64_t rows = 40, C = 64;
  auto x = randn(rows * C, 7);
  DeviceBuffer<float> dX(x), dY(x.size()), dR(rows), dR2(rows);
  cuda::rmsnorm_forward(dX.get(), dY.get(), dR.get(), rows, C, 1.2f, kEps, nullptr);
  cuda::rmsnorm_forward(dX.get(), dX.get(), dR2.get(), rows, C, 1.2f, kEps, nullptr);
  EXPECT_EQ(dX.download(), dY.download());
}

}  // namespace
}  // namespace vt::gputest
