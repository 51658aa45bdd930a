// RoPE fused with QK-norm (core/ops/rope.h ops::rope_rmsnorm, rope_rmsnorm_backward; host kernels
// cpu::rope_rmsnorm_forward/backward) against what it replaces and against float64:
//   - through the ops:: dispatch on the CPU backend and the device emulator, f32 and bf16: the
//     fused op against ops::rope then ops::rmsnorm (forward) and rmsnorm_backward then
//     rope_backward (backward), and both against the formula in float64 from the stored inputs;
//     in place (y = x, dx = dy) bit for bit equal to out of place; the emulator equal to the CPU;
//   - the float64 kernels: forward against rope_forward + rmsnorm_forward, backward against
//     central finite differences of the fused forward;
//   - a position offset continues the sequence (what decoding relies on);
//   - refusals by name.
// The CUDA kernels against the CPU: tests/gpu/op_parity_test.cc rows rope_rmsnorm and
// rope_rmsnorm_backward.
//
// Tolerances. f32: the fused and unfused paths perform the same fp32 rotation and scaling; they
// differ in where the sum of squares is taken (x or the fp32-rounded R x) and in the order of
// the backward's operations: a few fp32 ulps, checked at 1e-6 relative to the element (forward)
// or to the element's condition scale s r (|g_j| + |x_j| r^2 sum_i |g_i x_i| / hd) (backward,
// where g - x b cancels). bf16 (u = 2^-8, the unit roundoff of round-to-nearest with 8
// significant bits), derived in the comments of the checks below: the fused op rounds once
// (within u of float64 from the same inputs); the unfused pair also rounds R x to bf16 before
// the norm, so it may differ from the fused op by the first-order effect of that rounding plus
// both final roundings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cpu_kernels.h"
#include "core/ops.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/tensor.h"
#include "kernel_test_util.h"

namespace vt {
namespace {

constexpr int64_t B = 2, T = 5, H = 3;
constexpr double kBase = 10000.0, kEps = 1e-6;
constexpr float kScale = 1.2f;
constexpr double kU = 1.0 / 256;  // bf16 unit roundoff

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

Shape shape_of(int64_t hd) { return {B, T, H, hd}; }
Tensor make(const std::vector<float>& v, Shape s, Device dev, DType dt) {
  return Tensor::from_host(v.data(), std::move(s), Device::kCPU).to(dev, dt);
}
Tensor zeros(Shape s, Device dev, DType dt) { return Tensor::zeros(std::move(s), dt, dev); }
Tensor rstd_of(Device dev) { return Tensor::zeros({B * T * H}, DType::kF32, dev); }

std::vector<double> as_double(const Tensor& t) {
  const std::vector<float> v = t.to_host_f32();
  return std::vector<double>(v.begin(), v.end());
}

// Bit for bit (bf16 values widen to f32 exactly).
void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  const std::vector<float> va = a.to_host_f32(), vb = b.to_host_f32();
  ASSERT_EQ(va.size(), vb.size()) << what;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < va.size(); ++i)
    if (std::memcmp(&va[i], &vb[i], sizeof(float)) != 0 && bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " differences, first at " << first;
}

// Every |got_i - want_i| <= bound_i; on failure names the worst element.
void expect_within(const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(got.size(), bound.size()) << what;
  int64_t bad = 0;
  size_t worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= bound[i])) ++bad;
    const double ratio = bound[i] > 0 ? err / bound[i] : (err > 0 ? INFINITY : 0);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size()
                    << " elements outside the bound; worst " << worst << ": got " << got[worst]
                    << ", want " << want[worst] << ", bound " << bound[worst];
}

// The float64 formula from stored (f32 or bf16-valued) x and dy, per (b, t, head) vector i at
// position t + pos0: z = R x, r = 1/sqrt(mean(x^2) + eps), y = s r z; g = R^T dy,
// dx = s r (g - x r^2 (g . x) / hd). Plus what the tolerances need: `cond` (the backward's
// condition scale per element, see the top), `dq` (the gradient in the rotated frame, s r (dy -
// z r^2 (dy . z) / hd), which the unfused pair rounds) and `eq` (the first-order error of the
// unfused backward's rotated-frame gradient from bf16 rounding of z, in units of u; see
// BackwardMatchesRmsnormThenRopeBackward).
struct Formula {
  std::vector<double> y, rstd, dx, cond, dq, eq;
};

Formula formula(const std::vector<double>& x, const std::vector<double>& dy, int64_t hd,
                int64_t pos0) {
  const int64_t half = hd / 2, n = B * T * H;
  Formula f;
  f.y.resize(x.size()), f.dx.resize(x.size()), f.cond.resize(x.size());
  f.dq.resize(x.size()), f.eq.resize(x.size()), f.rstd.resize(static_cast<size_t>(n));
  const size_t n_hd = static_cast<size_t>(hd), n_half = static_cast<size_t>(half);
  std::vector<double> z(n_hd), g(n_hd), c(n_half), s(n_half);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = (i / H) % T, o = i * hd;
    for (int64_t j = 0; j < half; ++j) {
      const double ang = double(t + pos0) * std::pow(kBase, -2.0 * double(j) / double(hd));
      c[j] = std::cos(ang), s[j] = std::sin(ang);
    }
    double ss = 0, gx = 0, agx = 0, adz = 0;
    for (int64_t j = 0; j < half; ++j) {
      const double a = x[o + j], b = x[o + j + half], da = dy[o + j], db = dy[o + j + half];
      z[j] = a * c[j] - b * s[j], z[j + half] = b * c[j] + a * s[j];
      g[j] = da * c[j] + db * s[j], g[j + half] = db * c[j] - da * s[j];
    }
    for (int64_t j = 0; j < hd; ++j) {
      ss += x[o + j] * x[o + j];
      gx += g[j] * x[o + j];
      agx += std::abs(g[j] * x[o + j]);
      adz += std::abs(dy[o + j] * z[j]);
    }
    const double r = 1.0 / std::sqrt(ss / double(hd) + kEps), sr = kScale * r;
    f.rstd[i] = r;
    for (int64_t j = 0; j < hd; ++j) {
      f.y[o + j] = sr * z[j];
      f.dx[o + j] = sr * (g[j] - x[o + j] * r * r * gx / double(hd));
      f.cond[o + j] = sr * (std::abs(g[j]) + std::abs(x[o + j]) * r * r * agx / double(hd));
      f.dq[o + j] = sr * (dy[o + j] - z[j] * r * r * gx / double(hd));  // dy . z = g . x
      f.eq[o + j] = sr * std::abs(dy[o + j]) + 5.0 * sr * r * r * std::abs(z[j]) * adz / double(hd);
    }
  }
  return f;
}

// v_j + v_(j's pair): what a rotation of the pair (j, j +- hd/2) can make of per-element bounds.
std::vector<double> with_pair(const std::vector<double>& v, int64_t hd) {
  std::vector<double> out(v.size());
  const int64_t half = hd / 2;
  for (size_t e = 0; e < v.size(); ++e) {
    const int64_t j = int64_t(e) % hd;
    out[e] = v[e] + v[e + (j < half ? half : -half)];
  }
  return out;
}

class RopeRmsNorm : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().dev == Device::kCUDA) set_device_backend(make_device_emulator());
  }
  void TearDown() override {
    if (GetParam().dev == Device::kCUDA) set_device_backend(nullptr);
  }
};

TEST_P(RopeRmsNorm, ForwardMatchesRopeThenRmsnorm) {
  const Case c = GetParam();
  const bool bf = c.dt == DType::kBF16;
  uint64_t seed = 1;
  for (int64_t hd : {6, 32}) {
    for (int64_t pos0 : {0, 11}) {
      SCOPED_TRACE(testing::Message() << "hd " << hd << " pos0 " << pos0);
      const std::vector<float> xv = randn(B * T * H * hd, seed++, 1.7f);
      const Tensor x = make(xv, shape_of(hd), c.dev, c.dt);
      Tensor y = zeros(shape_of(hd), c.dev, c.dt), r = rstd_of(c.dev);
      ops::rope_rmsnorm(x, y, r, kBase, kScale, kEps, pos0);
      expect_same(x, make(xv, shape_of(hd), c.dev, c.dt), "x unchanged");
      // The unfused pair as the attention ran it before the fusion.
      Tensor xr = zeros(shape_of(hd), c.dev, c.dt), y2 = zeros(shape_of(hd), c.dev, c.dt);
      Tensor r2 = rstd_of(c.dev);
      ops::rope(x, xr, kBase, pos0);
      ops::rmsnorm(xr, y2, r2, kScale, kEps);

      const Formula f = formula(as_double(x), std::vector<double>(xv.size(), 0.0), hd, pos0);
      const std::vector<double> yf = as_double(y), yu = as_double(y2);
      const double ymax = test::max_abs(f.y);
      std::vector<double> b_exact(yf.size()), b_pair(yf.size()), b_rstd(f.rstd.size()),
          b_rstd_exact(f.rstd.size());
      for (size_t e = 0; e < yf.size(); ++e) {
        // Fused: one fp32 rotation and scaling (a few ulps), then one rounding to bf16 (u).
        b_exact[e] = (bf ? kU : 0.0) * std::abs(f.y[e]) + 1e-6 * std::abs(f.y[e]) + 1e-7 * ymax;
        // Unfused bf16: z~ = R x rounded (|z~_j - z_j| <= u |z_j|), so ||z~|| is within a factor
        // 1 +- u of ||z|| and its rstd within 1/(1 -+ u) of r: s r~ z~_j is within
        // (1+u)/(1-u) - 1 = 2u/(1-u) of s r z_j; then each side's rounding to bf16 adds u.
        // Total 2u/(1-u) + 2u (+ u^2 terms) < 4.1 u relative, plus the f32 terms.
        b_pair[e] = (bf ? 4.1 * kU : 0.0) * std::abs(f.y[e]) + 2e-6 * std::abs(f.y[e]) +
                    2e-7 * ymax;
      }
      for (size_t i = 0; i < b_rstd.size(); ++i) {
        // rstd is f32 from a float64 sum of the stored x: one f32 rounding. The unfused one is
        // taken from z~, whose norm is within 1 +- u of z's: r~ within u/(1-u) < 1.01 u of r.
        b_rstd_exact[i] = 1e-6 * f.rstd[i];
        b_rstd[i] = (bf ? 1.01 * kU : 0.0) * f.rstd[i] + 1e-6 * f.rstd[i];
      }
      expect_within(yf, f.y, b_exact, "fused y against float64");
      expect_within(as_double(r), f.rstd, b_rstd_exact,
                    "fused rstd against float64 (from the stored x itself)");
      expect_within(yf, yu, b_pair, "fused y against rope then rmsnorm");
      expect_within(as_double(r), as_double(r2), b_rstd, "fused rstd against rmsnorm's");

      // In place: the same bits as out of place.
      Tensor xi = make(xv, shape_of(hd), c.dev, c.dt), ri = rstd_of(c.dev);
      ops::rope_rmsnorm(xi, xi, ri, kBase, kScale, kEps, pos0);
      expect_same(xi, y, "in place y");
      expect_same(ri, r, "in place rstd");
      // The device emulator computes with the CPU's kernels: the same bits.
      if (c.dev == Device::kCUDA) {
        const Tensor xc = make(xv, shape_of(hd), Device::kCPU, c.dt);
        Tensor yc = zeros(shape_of(hd), Device::kCPU, c.dt), rc = rstd_of(Device::kCPU);
        ops::rope_rmsnorm(xc, yc, rc, kBase, kScale, kEps, pos0);
        expect_same(y, yc, "emulated against CPU, y");
        expect_same(r, rc, "emulated against CPU, rstd");
      }
    }
  }
}

TEST_P(RopeRmsNorm, BackwardMatchesRmsnormThenRopeBackward) {
  const Case c = GetParam();
  const bool bf = c.dt == DType::kBF16;
  uint64_t seed = 100;
  for (int64_t hd : {6, 32}) {
    for (int64_t pos0 : {0, 11}) {
      SCOPED_TRACE(testing::Message() << "hd " << hd << " pos0 " << pos0);
      const std::vector<float> xv = randn(B * T * H * hd, seed++, 1.7f);
      const std::vector<float> dyv = randn(B * T * H * hd, seed++);
      const Tensor x = make(xv, shape_of(hd), c.dev, c.dt);
      const Tensor dy = make(dyv, shape_of(hd), c.dev, c.dt);
      // Fused, from the fused forward's rstd.
      Tensor y = zeros(shape_of(hd), c.dev, c.dt), r = rstd_of(c.dev);
      ops::rope_rmsnorm(x, y, r, kBase, kScale, kEps, pos0);
      Tensor dx = zeros(shape_of(hd), c.dev, c.dt);
      ops::rope_rmsnorm_backward(x, r, dy, dx, kBase, kScale, pos0);
      expect_same(dy, make(dyv, shape_of(hd), c.dev, c.dt), "dy unchanged");
      // Unfused, as the attention ran it: rmsnorm_backward on the rotated copy and its rstd,
      // then rope_backward in place.
      Tensor xr = zeros(shape_of(hd), c.dev, c.dt), y2 = zeros(shape_of(hd), c.dev, c.dt);
      Tensor r2 = rstd_of(c.dev), dx2 = zeros(shape_of(hd), c.dev, c.dt);
      ops::rope(x, xr, kBase, pos0);
      ops::rmsnorm(xr, y2, r2, kScale, kEps);
      ops::rmsnorm_backward(xr, r2, dy, dx2, kScale, false);
      ops::rope_backward(dx2, dx2, kBase, pos0);

      const Formula f = formula(as_double(x), as_double(dy), hd, pos0);
      const std::vector<double> dxf = as_double(dx), dxu = as_double(dx2);
      const std::vector<double> cond2 = with_pair(f.cond, hd);
      std::vector<double> b_exact(dxf.size()), e_rot(dxf.size());
      for (size_t e = 0; e < dxf.size(); ++e) {
        // Fused: fp32 arithmetic with cancellation in g - x b (1e-5 of the condition scale of
        // the element and its pair, which the rotation mixes), then one rounding to bf16 (u).
        b_exact[e] = (bf ? kU : 0.0) * std::abs(f.dx[e]) + (bf ? 1e-5 : 1e-6) * cond2[e];
        // Unfused bf16, in the rotated frame: z~ (u per element) and r~ (u/(1-u)) perturb
        // s r dy_j by u s r |dy_j| and s r^3 z_j (dy . z) / hd by (3u from r^3, u from z_j, and
        // u sum |dy_i z_i| from the dot product) <= 5u s r^3 |z_j| sum|dy_i z_i| / hd: f.eq;
        // then dq is rounded to bf16 (u |dq_j|).
        e_rot[e] = kU * (f.eq[e] + std::abs(f.dq[e]));
      }
      // rope_backward rotates the pair (j, j +- hd/2): |c e_a + s e_b| <= e_a + e_b. Then both
      // sides' final roundings (u |dx_j| each) and the fused side's f32 terms; (1 + 8u) covers
      // the second-order terms of the first-order bound.
      const std::vector<double> e_x = with_pair(e_rot, hd);
      std::vector<double> b_pair(dxf.size());
      for (size_t e = 0; e < dxf.size(); ++e)
        b_pair[e] = bf ? (1 + 8 * kU) * e_x[e] + 2 * kU * std::abs(f.dx[e]) + 2e-5 * cond2[e]
                       : 2e-6 * cond2[e];
      expect_within(dxf, f.dx, b_exact, "fused dx against float64");
      expect_within(dxf, dxu, b_pair, "fused dx against rmsnorm_backward then rope_backward");

      // dx = dy (in place): the same bits as into a tensor of its own.
      Tensor g = make(dyv, shape_of(hd), c.dev, c.dt);
      ops::rope_rmsnorm_backward(x, r, g, g, kBase, kScale, pos0);
      expect_same(g, dx, "in place dx");
      if (c.dev == Device::kCUDA) {
        const Tensor xc = make(xv, shape_of(hd), Device::kCPU, c.dt);
        const Tensor dyc = make(dyv, shape_of(hd), Device::kCPU, c.dt);
        Tensor yc = zeros(shape_of(hd), Device::kCPU, c.dt), rc = rstd_of(Device::kCPU);
        Tensor dxc = zeros(shape_of(hd), Device::kCPU, c.dt);
        ops::rope_rmsnorm(xc, yc, rc, kBase, kScale, kEps, pos0);
        ops::rope_rmsnorm_backward(xc, rc, dyc, dxc, kBase, kScale, pos0);
        expect_same(dx, dxc, "emulated against CPU, dx");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RopeRmsNorm,
                         ::testing::Values(Case{Device::kCPU, DType::kF32},
                                           Case{Device::kCPU, DType::kBF16},
                                           Case{Device::kCUDA, DType::kF32},
                                           Case{Device::kCUDA, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.dev == Device::kCPU ? "cpu_" : "emulated_") +
                                  dtype_name(i.param.dt);
                         });

// The float64 host kernels: the fused forward is rope_forward then rmsnorm_forward (to float64
// rounding), and the fused backward is the gradient of the fused forward (central finite
// differences of sum(w * y)), so two equal wrong answers above cannot pass.
TEST(RopeRmsNormFloat64, ForwardIsRopeThenRmsnorm) {
  const int64_t hd = 16, n = B * T * H * hd;
  for (int64_t pos0 : {0, 7}) {
    const test::Vec x = test::randn(size_t(n), 200 + pos0, 1.3);
    test::Vec y(x.size()), r(size_t(B * T * H)), z(x.size()), y2(x.size()), r2(r.size());
    cpu::rope_rmsnorm_forward<double>(x.data(), y.data(), r.data(), B, T, H, hd, kBase, kScale,
                                      kEps, pos0);
    cpu::rope_forward<double>(x.data(), z.data(), B, T, H, hd, kBase, pos0);
    cpu::rmsnorm_forward<double>(z.data(), y2.data(), r2.data(), B * T * H, hd, kScale, kEps);
    test::expect_close(y, y2, 1e-13, "y pos0 " + std::to_string(pos0));
    test::expect_close(r, r2, 1e-13, "rstd pos0 " + std::to_string(pos0));
  }
}

TEST(RopeRmsNormFloat64, BackwardMatchesFiniteDifferences) {
  const int64_t hd = 8, n = B * T * H * hd, pos0 = 3;
  test::Vec x = test::randn(size_t(n), 210, 1.3);
  const test::Vec w = test::randn(x.size(), 211);
  test::Vec y(x.size()), r(size_t(B * T * H)), dx(x.size());
  cpu::rope_rmsnorm_forward<double>(x.data(), y.data(), r.data(), B, T, H, hd, kBase, kScale, kEps,
                                    pos0);
  cpu::rope_rmsnorm_backward<double>(x.data(), r.data(), w.data(), dx.data(), B, T, H, hd, kBase,
                                     kScale, pos0);
  test::check_fd(
      x,
      [&] {
        test::Vec yy(x.size()), rr(r.size());
        cpu::rope_rmsnorm_forward<double>(x.data(), yy.data(), rr.data(), B, T, H, hd, kBase,
                                          kScale, kEps, pos0);
        return test::dot(w, yy);
      },
      dx, "dx");
  // dx aliasing dy: the same values.
  test::Vec g = w;
  cpu::rope_rmsnorm_backward<double>(x.data(), r.data(), g.data(), g.data(), B, T, H, hd, kBase,
                                     kScale, pos0);
  test::expect_close(g, dx, 1e-15, "in place");
}

// Decoding calls the op one position at a time with pos0 = t: the vectors of a sequence at
// positions p.. through pos0 = p equal, bit for bit, those of the whole sequence from 0.
TEST(RopeRmsNormOps, PositionOffsetContinuesTheSequence) {
  const int64_t hd = 32, Tl = 9, p = 4, w = H * hd;
  const std::vector<float> xv = randn(Tl * w, 300);
  const Tensor x = Tensor::from_host(xv.data(), {1, Tl, H, hd}, Device::kCPU);
  Tensor y = Tensor::zeros({1, Tl, H, hd}), r = Tensor::zeros({Tl * H});
  ops::rope_rmsnorm(x, y, r, kBase, kScale, kEps);
  const Tensor xt = Tensor::from_host(xv.data() + p * w, {1, Tl - p, H, hd}, Device::kCPU);
  Tensor yt = Tensor::zeros({1, Tl - p, H, hd}), rt = Tensor::zeros({(Tl - p) * H});
  ops::rope_rmsnorm(xt, yt, rt, kBase, kScale, kEps, p);
  expect_same(yt.reshaped({(Tl - p) * w}), y.flat(p * w, (Tl - p) * w), "y");
  expect_same(rt, r.flat(p * H, (Tl - p) * H), "rstd");
  // And the backward at the offset equals the whole sequence's.
  const std::vector<float> dyv = randn(Tl * w, 301);
  const Tensor dy = Tensor::from_host(dyv.data(), {1, Tl, H, hd}, Device::kCPU);
  Tensor dx = Tensor::zeros({1, Tl, H, hd});
  ops::rope_rmsnorm_backward(x, r, dy, dx, kBase, kScale);
  const Tensor dyt = Tensor::from_host(dyv.data() + p * w, {1, Tl - p, H, hd}, Device::kCPU);
  Tensor dxt = Tensor::zeros({1, Tl - p, H, hd});
  ops::rope_rmsnorm_backward(xt, rt, dyt, dxt, kBase, kScale, p);
  expect_same(dxt.reshaped({(Tl - p) * w}), dx.flat(p * w, (Tl - p) * w), "dx");
}

// Calls the fused op cannot serve are refused, naming the op and the argument.
TEST(RopeRmsNormRefusals, ByName) {
  const int64_t hd = 8, n = B * T * H * hd;
  const std::vector<float> v = randn(n, 400);
  const Device cpu = Device::kCPU;
  const Tensor x = make(v, shape_of(hd), cpu, DType::kF32);
  const Tensor y = zeros(shape_of(hd), cpu, DType::kF32), r = rstd_of(cpu);
  EXPECT_DEATH(ops::rope_rmsnorm(make(randn(B * T * H * 7, 401), {B, T, H, 7}, cpu, DType::kF32),
                                 zeros({B, T, H, 7}, cpu, DType::kF32), r, kBase, kScale, kEps),
               "rope_rmsnorm: head_dim must be even, got 7");
  EXPECT_DEATH(ops::rope_rmsnorm(x.reshaped({B * T, H * hd}), y, r, kBase, kScale, kEps),
               "rope_rmsnorm: x must be \\(B, T, heads, head_dim\\)");
  EXPECT_DEATH(ops::rope_rmsnorm(x, zeros(shape_of(hd), cpu, DType::kBF16), r, kBase, kScale, kEps),
               "rope_rmsnorm: y is bf16, x f32");
  EXPECT_DEATH(ops::rope_rmsnorm(x, zeros({B, T, H, hd + 2}, cpu, DType::kF32), r, kBase, kScale,
                                 kEps),
               "rope_rmsnorm: y has");
  EXPECT_DEATH(ops::rope_rmsnorm(x, y, Tensor::zeros({B * T * H + 1}), kBase, kScale, kEps),
               "rope_rmsnorm: rstd has 31 entries for 30");
  EXPECT_DEATH(ops::rope_rmsnorm(x, y, Tensor::zeros({B * T * H}, DType::kBF16), kBase, kScale,
                                 kEps),
               "rope_rmsnorm: rstd must be f32, got bf16");
  EXPECT_DEATH(ops::rope_rmsnorm(x, y, r, kBase, kScale, kEps, -1),
               "rope_rmsnorm: position offset must be >= 0");
  // y one element past x: overlapping, not the same tensor.
  const Tensor big = Tensor::zeros({2 * n});
  EXPECT_DEATH(ops::rope_rmsnorm(big.flat(0, n).reshaped(shape_of(hd)),
                                 big.flat(1, n).reshaped(shape_of(hd)), r, kBase, kScale, kEps),
               "rope_rmsnorm: y partly overlaps x");
  // rstd inside y.
  EXPECT_DEATH(ops::rope_rmsnorm(x, big.flat(0, n).reshaped(shape_of(hd)), big.flat(8, B * T * H),
                                 kBase, kScale, kEps),
               "rope_rmsnorm: rstd overlaps y");
  // Backward: dx may be dy, never x; one dtype.
  EXPECT_DEATH(ops::rope_rmsnorm_backward(x, r, make(v, shape_of(hd), cpu, DType::kF32), x, kBase,
                                          kScale),
               "rope_rmsnorm_backward: dx overlaps x");
  EXPECT_DEATH(ops::rope_rmsnorm_backward(x, r, make(v, shape_of(hd), cpu, DType::kBF16), y, kBase,
                                          kScale),
               "rope_rmsnorm_backward: dy is bf16, x f32");
  EXPECT_DEATH(ops::rope_rmsnorm_backward(x, r, big.flat(0, n).reshaped(shape_of(hd)),
                                          big.flat(2, n).reshaped(shape_of(hd)), kBase, kScale),
               "rope_rmsnorm_backward: dx partly overlaps dy");
}

}  // namespace
}  // namespace vt
