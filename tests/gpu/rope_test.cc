// CUDA RoPE against vt::cpu::rope_forward/backward on random inputs, f32 and bf16, with a
// position offset (as in incremental decoding), and the cos/sin table against double-precision
// cos/sin.
#include "kernels/rope.cuh"

#include <cmath>

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

constexpr int64_t B = 2, T = 33, H = 3, hd = 64;
constexpr double kBase = 10000.0;

// A table of `positions` on the device (positions x hd/2 float2).
std::vector<float> make_table(int64_t positions, DeviceBuffer<float>& buf) {
  cuda::rope_table(reinterpret_cast<float2*>(buf.get()), positions, hd, kBase, nullptr);
  return buf.download();
}

// Entries are cos/sin of p * base^(-2j/hd) rounded to fp32: within half an fp32 ulp of |x| <= 1
// (2^-25) plus the double angle's error (p * inv_freq ~ 1e3 rad at 1e-16 relative), 2^-24 total.
TEST(GpuRope, TableHoldsFp32CosSin) {
  VT_SKIP_WITHOUT_CUDA();
  const int64_t positions = 1100, half = hd / 2;
  DeviceBuffer<float> buf(size_t(positions * half * 2));
  const auto tab = make_table(positions, buf);
  double worst = 0;
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t j = 0; j < half; ++j) {
      const double a = double(p) * std::pow(kBase, -2.0 * double(j) / double(hd));
      const size_t i = size_t((p * half + j) * 2);
      worst = std::max({worst, std::fabs(tab[i] - std::cos(a)), std::fabs(tab[i + 1] - std::sin(a))});
    }
  EXPECT_LE(worst, std::ldexp(1.0, -24));
}

// fp32: both sides use fp32 cos/sin rounded from double angles; the rotation a*c - b*s may be
// FMA-contracted on the GPU, so a few ulp on values of size ~|x|: rtol 1e-6, atol 1e-6.
TEST(GpuRope, ForwardBackwardF32MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  for (int64_t offset : {int64_t(0), int64_t(1000)}) {
    const size_t n = B * T * H * hd;
    auto x = randn(n, 11);
    std::vector<float> y(n), dx(n);
    cpu::rope_forward<float>(x.data(), y.data(), B, T, H, hd, kBase, offset);
    cpu::rope_backward<float>(x.data(), dx.data(), B, T, H, hd, kBase, offset);
    DeviceBuffer<float> table(size_t((T + offset) * hd));
    make_table(T + offset, table);
    const float2* tab = reinterpret_cast<const float2*>(table.get());
    DeviceBuffer<float> dX(x), dY(n), dDX(n);
    cuda::rope_forward(dX.get(), dY.get(), B, T, H, hd, tab, offset, nullptr);
    cuda::rope_backward(dX.get(), dDX.get(), B, T, H, hd, tab, offset, nullptr);
    EXPECT_TRUE(all_close(dY.download(), y, 1e-6, 1e-6)) << "offset " << offset;
    EXPECT_TRUE(all_close(dDX.download(), dx, 1e-6, 1e-6)) << "offset " << offset;
    // In place, forward then backward returns x (rotation is orthogonal): fp32 round-off only.
    cuda::rope_forward(dX.get(), dX.get(), B, T, H, hd, tab, offset, nullptr);
    cuda::rope_backward(dX.get(), dX.get(), B, T, H, hd, tab, offset, nullptr);
    EXPECT_TRUE(all_close(dX.download(), x, 1e-5, 1e-6)) << "round trip offset " << offset;
  }
}

// bf16: same fp32 math on bf16-rounded inputs, one rounding of each output (kBf16Rtol); atol for
// outputs that cancel to near zero (terms of size ~|x| ~ 1, rounded inputs are exact).
TEST(GpuRope, ForwardBackwardBf16MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  const int64_t offset = 7;
  const size_t n = B * T * H * hd;
  auto x = rounded_bf16(randn(n, 12));
  std::vector<float> y(n), dx(n);
  cpu::rope_forward<float>(x.data(), y.data(), B, T, H, hd, kBase, offset);
  cpu::rope_backward<float>(x.data(), dx.data(), B, T, H, hd, kBase, offset);
  DeviceBuffer<float> table(size_t((T + offset) * hd));
  make_table(T + offset, table);
  const float2* tab = reinterpret_cast<const float2*>(table.get());
  DeviceBuffer<__nv_bfloat16> dX(to_bf16(x)), dY(n), dDX(n);
  cuda::rope_forward(dX.get(), dY.get(), B, T, H, hd, tab, offset, nullptr);
  cuda::rope_backward(dX.get(), dDX.get(), B, T, H, hd, tab, offset, nullptr);
  EXPECT_TRUE(all_close(from_bf16(dY.download<uint16_t>()), y, kBf16Rtol, 1e-6));
  EXPECT_TRUE(all_close(from_bf16(dDX.download<uint16_t>()), dx, kBf16Rtol, 1e-6));
}

}  // namespace
}  // namespace vt::gputest
