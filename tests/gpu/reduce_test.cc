// CUDA sum of squares (grad norm) and dot in fp64 against host fp64 sums; accumulation over
// several tensors; bf16 input; empty input.
#include "kernels/reduce.cuh"

#include <cstdint>
#include <cstring>

#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

double host_dot(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += double(x[i]) * double(y[i]);
  return s;
}

// Products of two floats are exact in double; only the summation order differs, so the relative
// error is ~log2(n) * 1.1e-16 for the tree and n * 1.1e-16 for the host loop: rtol 1e-10.
TEST(GpuReduce, SumSquaresAndDotMatchHostFp64) {
  VT_SKIP_WITHOUT_CUDA();
  auto a = randn(1000003, 91), b = randn(777, 92, 10.0f), c = randn(1000003, 93);
  DeviceBuffer<float> dA(a), dB(b), dC(c);
  DeviceBuffer<double> partials(std::vector<double>(cuda::kReduceScratch, 0.0)), out(1);
  cuda::sum_squares(dA.get(), a.size(), partials.get(), out.get(), false, nullptr);
  EXPECT_NEAR(out.download()[0], host_dot(a, a), 1e-10 * host_dot(a, a));
  cuda::sum_squares(dB.get(), b.size(), partials.get(), out.get(), true, nullptr);
  const double both = host_dot(a, a) + host_dot(b, b);
  EXPECT_NEAR(out.download()[0], both, 1e-10 * both);
  cuda::dot(dA.get(), dC.get(), a.size(), partials.get(), out.get(), false, nullptr);
  double abs_dot = 0.0;  // the dot cancels: scale its tolerance by sum |a c|
  for (size_t i = 0; i < a.size(); ++i) abs_dot += std::fabs(double(a[i]) * double(c[i]));
  EXPECT_NEAR(out.download()[0], host_dot(a, c), 1e-10 * abs_dot);
  cuda::sum_squares(dA.get(), 0, partials.get(), out.get(), false, nullptr);
  EXPECT_EQ(out.download()[0], 0.0);
}

// bf16 input: the squares of bf16 values are exact in double too: same tolerance.
TEST(GpuReduce, SumSquaresBf16MatchesHostFp64) {
  VT_SKIP_WITHOUT_CUDA();
  auto a = rounded_bf16(randn(300001, 94));
  DeviceBuffer<__nv_bfloat16> dA(to_bf16(a));
  DeviceBuffer<double> partials(std::vector<double>(cuda::kReduceScratch, 0.0)), out(1);
  cuda::sum_squares(dA.get(), a.size(), partials.get(), out.get(), false, nullptr);
  EXPECT_NEAR(out.download()[0], host_dot(a, a), 1e-10 * host_dot(a, a));
}

// One launch: the last block sums the partials and leaves the counter word at zero for the next
// call (a counter left at k would make every later call end k blocks early, or never), also for
// grids of one block and of every block, and on many calls in a row.
TEST(GpuReduce, OneLaunchLeavesTheCounterAtZero) {
  VT_SKIP_WITHOUT_CUDA();
  DeviceBuffer<double> partials(std::vector<double>(cuda::kReduceScratch, 0.0)), out(1);
  for (size_t n : {size_t(1), size_t(2047), size_t(2048 * 37 + 5), size_t(4000000)}) {
    SCOPED_TRACE(n);
    auto a = randn(n, 95 + n % 7);
    DeviceBuffer<float> d(a);
    for (int rep = 0; rep < 3; ++rep) {
      cuda::sum_squares(d.get(), a.size(), partials.get(), out.get(), false, nullptr);
      ASSERT_NEAR(out.download()[0], host_dot(a, a), 1e-10 * host_dot(a, a));
      const auto s = partials.download();
      uint32_t counter;
      std::memcpy(&counter, &s[cuda::kReduceBlocks], sizeof(counter));
      ASSERT_EQ(counter, 0u);
    }
  }
}

}  // namespace
}  // namespace vt::gputest
