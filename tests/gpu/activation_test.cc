// CUDA ReLU^2 against vt::cpu::relu2_forward/backward on random inputs, f32 and bf16.
#include "kernels/activation.cuh"

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

constexpr int64_t kN = 100003;  // not a multiple of the block size

// fp32: one or two roundings on both sides in the same order; 2*r*dy may be FMA-free on both,
// so rtol 1e-6 (a few ulp) and no atol.
TEST(GpuRelu2, ForwardBackwardF32MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  auto x = randn(kN, 21), dy = randn(kN, 22), dx0 = randn(kN, 23);
  std::vector<float> y(kN), dx(kN), dxa = dx0;
  cpu::relu2_forward<float>(x.data(), y.data(), kN);
  cpu::relu2_backward<float>(x.data(), dy.data(), dx.data(), kN, false);
  cpu::relu2_backward<float>(x.data(), dy.data(), dxa.data(), kN, true);
  DeviceBuffer<float> dX(x), dY(kN), dDY(dy), dDX(kN), dDXA(dx0);
  cuda::relu2_forward(dX.get(), dY.get(), kN, nullptr);
  cuda::relu2_backward(dX.get(), dDY.get(), dDX.get(), kN, false, nullptr);
  cuda::relu2_backward(dX.get(), dDY.get(), dDXA.get(), kN, true, nullptr);
  EXPECT_TRUE(all_close(dY.download(), y, 1e-6, 0.0));
  EXPECT_TRUE(all_close(dDX.download(), dx, 1e-6, 0.0));
  // dx += ...: an FMA on the GPU may round once where the CPU rounds twice; atol for cancellation.
  EXPECT_TRUE(all_close(dDXA.download(), dxa, 1e-6, 1e-6));
}

// bf16: fp32 math on bf16-rounded inputs, one rounding per output (kBf16Rtol).
TEST(GpuRelu2, ForwardBackwardBf16MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  auto x = rounded_bf16(randn(kN, 24)), dy = rounded_bf16(randn(kN, 25));
  auto dx0 = rounded_bf16(randn(kN, 26));
  std::vector<float> y(kN), dx(kN), dxa = dx0;
  cpu::relu2_forward<float>(x.data(), y.data(), kN);
  cpu::relu2_backward<float>(x.data(), dy.data(), dx.data(), kN, false);
  cpu::relu2_backward<float>(x.data(), dy.data(), dxa.data(), kN, true);
  DeviceBuffer<__nv_bfloat16> dX(to_bf16(x)), dY(kN), dDY(to_bf16(dy)), dDX(kN),
      dDXA(to_bf16(dx0));
  cuda::relu2_forward(dX.get(), dY.get(), kN, nullptr);
  cuda::relu2_backward(dX.get(), dDY.get(), dDX.get(), kN, false, nullptr);
  cuda::relu2_backward(dX.get(), dDY.get(), dDXA.get(), kN, true, nullptr);
  EXPECT_TRUE(all_close(from_bf16(dY.download<uint16_t>()), y, kBf16Rtol, 0.0));
  EXPECT_TRUE(all_close(from_bf16(dDX.download<uint16_t>()), dx, kBf16Rtol, 0.0));
  EXPECT_TRUE(all_close(from_bf16(dDXA.download<uint16_t>()), dxa, kBf16Rtol, 1e-6));
}

}  // namespace
}  // namespace vt::gputest
