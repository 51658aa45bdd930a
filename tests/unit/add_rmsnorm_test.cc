// The RMSNorm fusions of core/ops/rmsnorm.h against the unfused ops they replace, through the
// ops:: dispatch on the CPU backend and on the device emulator (host memory tagged as a device),
// f32 and bf16: ops::add_rmsnorm against axpy, a copy and rmsnorm, and rmsnorm_backward with dy2
// against axpy(dy, dy2) and rmsnorm_backward. Both sides run the same host kernels' arithmetic,
// so they must agree bit for bit (the CUDA kernels against the CPU: tests/gpu/op_parity_test.cc,
// rows add_rmsnorm and rmsnorm_backward_sum). The fused results are also checked against the
// formula in float64, so that two equal wrong answers cannot pass. Refusals by name.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/ops/rmsnorm.h"
#include "core/tensor.h"

namespace vt {
namespace {

constexpr int64_t R = 7, C = 96;
constexpr float kScale = 1.0f;
constexpr double kEps = 1e-6;

std::vector<float> randn(int64_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

struct Case {
  Device dev;
  DType dt;
};

Tensor make(const std::vector<float>& v, const Case& c) {
  return Tensor::from_host(v.data(), {R, C}, Device::kCPU).to(c.dev, c.dt);
}
Tensor zeros(const Case& c, DType dt) { return Tensor::zeros({R, C}, dt, c.dev); }
Tensor rstd_of(const Case& c) { return Tensor::zeros({R}, DType::kF32, c.dev); }

// Bit for bit (bf16 values widen to f32 exactly).
void expect_same(const Tensor& a, const Tensor& b, const char* what) {
  const std::vector<float> va = a.to_host_f32(), vb = b.to_host_f32();
  ASSERT_EQ(va.size(), vb.size()) << what;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < va.size(); ++i)
    if (std::memcmp(&va[i], &vb[i], sizeof(float)) != 0 && bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << what << ": first difference at " << first << ": " << va[size_t(first)]
                    << " vs " << vb[size_t(first)];
}

class AddRmsNorm : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().dev == Device::kCUDA) set_device_backend(make_device_emulator());
  }
  void TearDown() override {
    if (GetParam().dev == Device::kCUDA) set_device_backend(nullptr);
  }
};

TEST_P(AddRmsNorm, EqualsAxpyCopyRmsnorm) {
  const Case c = GetParam();
  const std::vector<float> xv = randn(R * C, 1, 2.0f), dv = randn(R * C, 2, 0.7f);
  for (bool keeps : {true, false}) {
    SCOPED_TRACE(keeps ? "with keep" : "without keep");
    // Fused.
    Tensor x1 = make(xv, c), delta = make(dv, c);
    Tensor keep = keeps ? zeros(c, c.dt) : Tensor(), y1 = zeros(c, c.dt), r1 = rstd_of(c);
    ops::add_rmsnorm(x1, delta, keep, y1, r1, kScale, kEps);
    // Unfused, as prenorm ran before the fusion.
    Tensor x2 = make(xv, c), y2 = zeros(c, c.dt), r2 = rstd_of(c);
    ops::axpy(x2, delta);
    const Tensor kept = x2.clone();
    ops::rmsnorm(kept, y2, r2, kScale, kEps);
    expect_same(x1, x2, "x");
    if (keeps) expect_same(keep, kept, "keep");
    expect_same(y1, y2, "y");
    expect_same(r1, r2, "rstd");
    expect_same(delta, make(dv, c), "delta unchanged");

    // The formula in float64 from the stored inputs (bf16-rounded on a bf16 stream) and the
    // stored sum (rounded once more there).
    const std::vector<float> s = x1.to_host_f32(), y = y1.to_host_f32(), r = r1.to_host_f32();
    const std::vector<float> xs = make(xv, c).to_host_f32(), ds = delta.to_host_f32();
    const double tol = c.dt == DType::kBF16 ? 1.0 / 128 : 1e-6;
    for (int64_t i = 0; i < R; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < C; ++j) {
        const double want = double(xs[i * C + j]) + double(ds[i * C + j]);
        EXPECT_NEAR(s[i * C + j], want, tol * (std::abs(want) + 1e-3)) << i << "," << j;
        ss += double(s[i * C + j]) * s[i * C + j];
      }
      const double rs = 1.0 / std::sqrt(ss / C + kEps);
      EXPECT_NEAR(r[i], rs, 1e-6 * rs) << "row " << i;
      for (int64_t j = 0; j < C; ++j)
        EXPECT_NEAR(y[i * C + j], s[i * C + j] * rs, tol * (std::abs(s[i * C + j] * rs) + 1e-3));
    }
  }
}

TEST_P(AddRmsNorm, BackwardSumEqualsAxpyThenBackward) {
  const Case c = GetParam();
  const std::vector<float> xv = randn(R * C, 3, 2.0f);
  Tensor x = make(xv, c), y = zeros(c, c.dt), r = rstd_of(c);
  ops::rmsnorm(x, y, r, kScale, kEps);
  const std::vector<float> dyv = randn(R * C, 4), dy2v = randn(R * C, 5, 0.5f),
                           dxv = randn(R * C, 6);
  for (bool acc : {true, false}) {
    SCOPED_TRACE(acc ? "accumulate" : "write");
    Tensor dy = make(dyv, c), dy2 = make(dy2v, c);
    Tensor dx1 = make(dxv, c), dx2 = make(dxv, c);
    ops::rmsnorm_backward(x, r, dy, dx1, kScale, acc, dy2);
    expect_same(dy, make(dyv, c), "dy unchanged");
    Tensor g = make(dyv, c);
    ops::axpy(g, dy2);
    ops::rmsnorm_backward(x, r, g, dx2, kScale, acc);
    expect_same(dx1, dx2, "dx");
    // Against dy alone: the second gradient must matter.
    Tensor dx3 = make(dxv, c);
    ops::rmsnorm_backward(x, r, dy, dx3, kScale, acc);
    const std::vector<float> a = dx1.to_host_f32(), b = dx3.to_host_f32();
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::abs(a[i] - b[i])));
    EXPECT_GT(diff, 0.1);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AddRmsNorm,
                         ::testing::Values(Case{Device::kCPU, DType::kF32},
                                           Case{Device::kCPU, DType::kBF16},
                                           Case{Device::kCUDA, DType::kF32},
                                           Case{Device::kCUDA, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.dev == Device::kCPU ? "cpu_" : "emulated_") +
                                  dtype_name(i.param.dt);
                         });

// A fused call where the fusion does not apply is refused, naming the op and the argument.
TEST(AddRmsNormRefusals, ByName) {
  const Case f{Device::kCPU, DType::kF32}, b{Device::kCPU, DType::kBF16};
  const std::vector<float> v = randn(R * C, 7);
  Tensor x = make(v, f), y = zeros(f, DType::kF32), r = rstd_of(f);
  EXPECT_DEATH(ops::add_rmsnorm(x, make(v, b), Tensor(), y, r, 1.0f, kEps),
               "add_rmsnorm: delta is bf16, the stream x f32");
  EXPECT_DEATH(ops::add_rmsnorm(x, make(v, f), Tensor(), zeros(f, DType::kBF16), r, 1.0f, kEps),
               "add_rmsnorm: y is bf16");
  EXPECT_DEATH(ops::add_rmsnorm(x, make(v, f), Tensor(), x, r, 1.0f, kEps),
               "add_rmsnorm: y aliases the stream x");
  EXPECT_DEATH(ops::add_rmsnorm(x, make(v, f), x, y, r, 1.0f, kEps),
               "add_rmsnorm: keep aliases the stream x");
  EXPECT_DEATH(ops::add_rmsnorm(x, x, Tensor(), y, r, 1.0f, kEps),
               "add_rmsnorm: delta aliases the stream x");
  EXPECT_DEATH(ops::add_rmsnorm(x, Tensor::zeros({R, C + 1}), Tensor(), y, r, 1.0f, kEps),
               "add_rmsnorm: delta has");
  EXPECT_DEATH(ops::add_rmsnorm(x, make(v, f), Tensor(), y, Tensor::zeros({R + 1}), 1.0f, kEps),
               "add_rmsnorm: rstd has 8 entries for 7 rows");
  EXPECT_DEATH(ops::rmsnorm_backward(x, r, make(v, f), zeros(f, DType::kF32), 1.0f, true,
                                     make(v, b)),
               "rmsnorm_backward: the fused gradient sum \\(dy2\\) needs one dtype");
}

}  // namespace
}  // namespace vt
