// NaN and inf propagate through every op the model uses, on every backend: the CPU (the reference,
// vectorized exp/tanh included), the device emulator and the CUDA backend (its kernels, on a GPU
// or on the CUDA emulation). A NaN put into one input element must show up as NaN in every output
// element that depends on it: a clamp, a max or a relu that drops a NaN would let a diverged run
// print a plausible loss. Each case also checks that unrelated outputs stay finite, so the test
// cannot pass by turning everything into NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda_backend.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/cuda_check.cuh"

namespace vt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Where { kCpu, kEmulator, kCuda };

class NonfiniteOps : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override {
    if (GetParam() == Where::kCuda) {
      if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (and no emulation)";
      set_device_backend(make_cuda_backend());
    } else if (GetParam() == Where::kEmulator) {
      set_device_backend(make_device_emulator());
    }
  }
  void TearDown() override {
    if (has_backend(Device::kCUDA)) {
      backend(Device::kCUDA).synchronize();
      set_device_backend(nullptr);
    }
  }
  Device dev() const { return GetParam() == Where::kCpu ? Device::kCPU : Device::kCUDA; }
  Tensor on(const std::vector<float>& v, Shape s) const { return Tensor::from_host(v.data(), std::move(s), dev()); }
  Tensor ints(const std::vector<int32_t>& v) const {
    return Tensor::from_host(v.data(), {static_cast<int64_t>(v.size())}, dev());
  }
  Tensor zeros(Shape s) const { return Tensor::zeros(std::move(s), DType::kF32, dev()); }
};

std::vector<float> ramp(size_t n, float scale = 0.1f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(1.0f + 0.7f * static_cast<float>(i));
  return v;
}

bool is_nan(float x) { return std::isnan(x); }

TEST_P(NonfiniteOps, Relu2KeepsNaNAndInf) {
  std::vector<float> x = {1.0f, -2.0f, kNaN, kInf, -kInf, 0.5f};
  Tensor y = zeros({6});
  ops::relu2(on(x, {6}), y);
  const std::vector<float> r = y.to_host_f32();
  EXPECT_TRUE(is_nan(r[2])) << r[2];
  EXPECT_EQ(r[3], kInf);
  EXPECT_EQ(r[4], 0.0f);
  EXPECT_FLOAT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[1], 0.0f);
}

TEST_P(NonfiniteOps, RmsnormRowOfANaNIsNaNOtherRowsFinite) {
  std::vector<float> x = ramp(4 * 8);
  x[8 + 3] = kNaN;  // row 1
  Tensor y = zeros({4, 8}), rstd = zeros({4});
  ops::rmsnorm(on(x, {4, 8}), y, rstd, 1.0f, 1e-6);
  const std::vector<float> r = y.to_host_f32();
  for (int c = 0; c < 8; ++c) {
    EXPECT_TRUE(is_nan(r[8 + c])) << c;
    EXPECT_TRUE(std::isfinite(r[c]) && std::isfinite(r[16 + c]) && std::isfinite(r[24 + c]));
  }
}

TEST_P(NonfiniteOps, MatmulRowOfANaNIsNaN) {
  std::vector<float> x = ramp(3 * 4), w = ramp(4 * 5, 0.2f);
  x[4 + 2] = kNaN;  // row 1
  Tensor y = zeros({3, 5});
  ops::matmul(on(x, {3, 4}), on(w, {4, 5}), y);
  const std::vector<float> r = y.to_host_f32();
  for (int c = 0; c < 5; ++c) {
    EXPECT_TRUE(is_nan(r[5 + c])) << c;
    EXPECT_TRUE(std::isfinite(r[c]) && std::isfinite(r[10 + c]));
  }
}

// Attention: a NaN in query t's vector makes output t NaN (every score of its row is NaN: a
// NaN-dropping maximum would see an empty row and write 0); a NaN in key s makes the outputs of
// the queries that see s NaN, and leaves the queries before s finite.
TEST_P(NonfiniteOps, AttentionNaNQueryAndKey) {
  const int64_t B = 1, T = 40, H = 2, hd = 16, W = 40;
  for (const char* which : {"q", "k"}) {
    std::vector<float> q = ramp(B * T * H * hd), k = ramp(B * T * H * hd, 0.13f), v = ramp(B * T * H * hd, 0.3f);
    const int64_t t_bad = 21;
    (std::string(which) == "q" ? q : k)[(t_bad * H + 0) * hd + 5] = kNaN;  // head 0
    Tensor out = zeros({B, T, H, hd}), lse = zeros({B, H, T});
    ops::attention(on(q, {B, T, H, hd}), on(k, {B, T, H, hd}), on(v, {B, T, H, hd}), out, lse, W,
                   0.25f);
    const std::vector<float> o = out.to_host_f32();
    for (int64_t t = 0; t < T; ++t) {
      const bool sees_bad = std::string(which) == "q" ? t == t_bad : t >= t_bad;
      for (int c = 0; c < hd; ++c) {
        const float head0 = o[(t * H + 0) * hd + c], head1 = o[(t * H + 1) * hd + c];
        EXPECT_EQ(is_nan(head0), sees_bad) << which << " t " << t << " c " << c;
        EXPECT_TRUE(std::isfinite(head1)) << which << " t " << t;
      }
    }
  }
}

// The soft-capped cross-entropy: a NaN logit makes its row's loss NaN (the capped tanh and the
// vectorized exp keep it), an inf logit is capped to a finite value.
TEST_P(NonfiniteOps, CrossEntropyNaNLogitNaNLoss) {
  const int64_t N = 3, Vp = 64;
  std::vector<float> logits = ramp(N * Vp, 1.0f);
  logits[1 * Vp + 17] = kNaN;  // row 1, not its target
  logits[2 * Vp + 9] = kInf;   // row 2: capped at 15
  XentArgs xa;
  xa.logits = on(logits, {N, Vp});
  xa.n_valid = Vp;
  xa.targets = ints({3, 4, 5});
  xa.cap = 15.0f;
  Tensor mx = zeros({N}), sum = zeros({N}), tz = zeros({N}), lse = zeros({N}), loss = zeros({N});
  ops::xent_partial(xa, mx, sum, tz);
  ops::xent_finish(mx, sum, tz, lse, loss);
  const std::vector<float> l = loss.to_host_f32();
  EXPECT_TRUE(std::isfinite(l[0])) << l[0];
  EXPECT_TRUE(is_nan(l[1])) << l[1];
  EXPECT_TRUE(std::isfinite(l[2])) << l[2];
}

// The fused loss end (in place) likewise: row 1's loss and every gradient of its row NaN, the
// other rows finite (row 2's inf logit is capped; its gradient there is 0 * p).
TEST_P(NonfiniteOps, FusedCrossEntropyNaNLogitNaNLossAndRowGradient) {
  const int64_t N = 3, Vp = 64;
  std::vector<float> logits = ramp(N * Vp, 1.0f);
  logits[1 * Vp + 17] = kNaN;
  logits[2 * Vp + 9] = kInf;
  XentArgs xa;
  xa.logits = on(logits, {N, Vp});
  xa.n_valid = Vp;
  xa.targets = ints({3, 4, 5});
  xa.cap = 15.0f;
  Tensor lse = zeros({N}), loss = zeros({N});
  ops::xent_loss_grad(xa, 0.5f, lse, loss, xa.logits);
  const std::vector<float> l = loss.to_host_f32(), d = xa.logits.to_host_f32();
  EXPECT_TRUE(std::isfinite(l[0])) << l[0];
  EXPECT_TRUE(is_nan(l[1])) << l[1];
  EXPECT_TRUE(std::isfinite(l[2])) << l[2];
  for (int64_t c = 0; c < Vp; ++c) {
    EXPECT_TRUE(std::isfinite(d[c])) << c;
    EXPECT_TRUE(is_nan(d[Vp + c])) << c;
    EXPECT_TRUE(std::isfinite(d[2 * Vp + c])) << c;
  }
}

TEST_P(NonfiniteOps, EmbeddingGathersANaNRowOnlyForItsId) {
  std::vector<float> table = ramp(10 * 4);
  table[7 * 4 + 1] = kNaN;
  Tensor out = zeros({3, 4});
  ops::embedding(on(table, {10, 4}), 0, ints({2, 7, 9}), out);
  const std::vector<float> r = out.to_host_f32();
  EXPECT_TRUE(is_nan(r[4 + 1]));
  EXPECT_TRUE(std::isfinite(r[0]) && std::isfinite(r[8]) && std::isfinite(r[4]));
}

TEST_P(NonfiniteOps, OptimizerUpdatesCarryANaNGradient) {
  std::vector<float> p = ramp(8), g = ramp(8, 0.01f);
  g[3] = kNaN;
  Tensor pt = on(p, {8}), m = zeros({8}), v = zeros({8});
  AdamWStepArgs a;
  a.lr = 1e-3;
  ops::adamw_update(pt, on(g, {8}), m, v, a);
  std::vector<float> r = pt.to_host_f32();
  EXPECT_TRUE(is_nan(r[3]));
  EXPECT_TRUE(std::isfinite(r[2]) && std::isfinite(r[4]));
  Tensor buf = zeros({8}), u = zeros({8});
  ops::muon_momentum(on(g, {8}), buf, u, 0.9);
  r = u.to_host_f32();
  EXPECT_TRUE(is_nan(r[3]));
  EXPECT_TRUE(std::isfinite(r[2]));
}

TEST_P(NonfiniteOps, SumOfSquaresSeesNaNAndInf) {
  std::vector<float> x = ramp(100);
  x[57] = kNaN;
  EXPECT_TRUE(std::isnan(ops::sum_squares(on(x, {100}))));
  x[57] = kInf;
  EXPECT_TRUE(std::isinf(ops::sum_squares(on(x, {100}))));
}

INSTANTIATE_TEST_SUITE_P(Backends, NonfiniteOps,
                         ::testing::Values(Where::kCpu, Where::kEmulator, Where::kCuda),
                         [](const auto& info) {
                           return std::string(info.param == Where::kCpu        ? "cpu"
                                              : info.param == Where::kEmulator ? "emulator"
                                                                                : "cuda");
                         });

}  // namespace
}  // namespace vt
