// CUDA f32 <-> bf16 casts: bit-exact against host round-to-nearest-even, including ties,
// infinities, the largest values and subnormals.
#include "kernels/cast.cuh"

#include <limits>

#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

TEST(GpuCast, RoundTripIsExactRoundToNearestEven) {
  VT_SKIP_WITHOUT_CUDA();
  auto x = randn(70001, 51, 100.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* tie: 1 + 2^-8 */,
                            1.01171875f /* tie: 1 + 3*2^-8 */, 3.0e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e-40f, -1e-39f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  DeviceBuffer<float> dX(x), dBack(x.size());
  DeviceBuffer<__nv_bfloat16> dB(x.size());
  cuda::cast_f32_to_bf16(dX.get(), dB.get(), x.size(), nullptr);
  cuda::cast_bf16_to_f32(dB.get(), dBack.get(), x.size(), nullptr);
  const auto bits = dB.download<uint16_t>();
  EXPECT_EQ(bits, to_bf16(x));
  EXPECT_EQ(dBack.download(), from_bf16(bits));
}

}  // namespace
}  // namespace vt::gputest
