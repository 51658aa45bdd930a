// Tests of the CPU attention kernels: forward (out and lse) against a naive O(T^2) attention with
// explicit causal/window/GQA mask loops written here in float64, float against double, backward
// against central finite differences in float64 of sum(w * out), and bitwise determinism of the
// backward across thread counts. Shapes cover B=2, GQA groups, windows that cross the 64-row
// query blocks, windows >= T, and T larger than one block.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "core/cpu_kernels.h"
#include "kernel_test_util.h"

namespace vt::cpu {
namespace {

using test::cast;
using test::check_fd;
using test::dot;
using test::expect_close;
using test::randn;
using test::Vec;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Naive attention: for each (b, h, t) loop over all keys s and keep those with 0 <= t-s < W.
void naive_attention(const Vec& q, const Vec& k, const Vec& v, const AttnShape& s, double scale,
                     Vec& out, Vec& lse) {
  out.assign(s.B * s.T * s.H * s.hd, 0.0);
  lse.assign(s.B * s.H * s.T, 0.0);
  const int64_t group = s.H / s.Hkv;
  Vec sc(s.T);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < s.T; ++t) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.T; ++j) {
          const bool visible = t - j >= 0 && t - j < s.window;
          if (!visible) continue;
          double d = 0;
          for (int64_t c = 0; c < s.hd; ++c)
            d += q[((b * s.T + t) * s.H + h) * s.hd + c] * k[((b * s.T + j) * s.Hkv + g) * s.hd + c];
          sc[j] = scale * d;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < s.T; ++j)
          if (t - j >= 0 && t - j < s.window) sum += std::exp(sc[j] - mx);
        lse[(b * s.H + h) * s.T + t] = mx + std::log(sum);
        for (int64_t j = 0; j < s.T; ++j) {
          if (!(t - j >= 0 && t - j < s.window)) continue;
          const double p = std::exp(sc[j] - mx) / sum;
          for (int64_t c = 0; c < s.hd; ++c)
            out[((b * s.T + t) * s.H + h) * s.hd + c] +=
                p * v[((b * s.T + j) * s.Hkv + g) * s.hd + c];
        }
      }
    }
}

AttnShape shape(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, int64_t W) {
  AttnShape s;
  s.B = B, s.T = T, s.H = H, s.Hkv = Hkv, s.hd = hd, s.window = W;
  return s;
}

struct AttnCase {
  AttnShape s;
  double scale;
  Vec q, k, v;
  explicit AttnCase(AttnShape sh, uint64_t seed = 1) : s(sh), scale(1.0 / std::sqrt(double(sh.hd))) {
    // std 1.5 keeps the softmax far from uniform, so masking mistakes show.
    q = randn(s.B * s.T * s.H * s.hd, seed, 1.5);
    k = randn(s.B * s.T * s.Hkv * s.hd, seed + 1, 1.5);
    v = randn(s.B * s.T * s.Hkv * s.hd, seed + 2);
  }
  std::string name() const {
    return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" + std::to_string(s.H) +
           " Hkv" + std::to_string(s.Hkv) + " hd" + std::to_string(s.hd) + " W" +
           std::to_string(s.window);
  }
};

const AttnShape kShapes[] = {
    shape(2, 37, 4, 2, 16, 8),     // GQA 2:1, window < T, T not a multiple of anything
    shape(2, 37, 4, 1, 16, 8),     // all query heads on one KV head
    shape(2, 37, 4, 4, 16, 37),    // window == T (full causal)
    shape(1, 37, 4, 2, 16, 1000),  // window > T
    shape(1, 37, 2, 2, 16, 1),     // each query sees only itself
    shape(2, 150, 4, 2, 16, 150),  // T > block (64): three blocks, full causal
    shape(2, 150, 4, 1, 16, 20),   // T > block, window crosses block boundaries
    shape(1, 150, 2, 2, 16, 64),   // window equal to the block size
    shape(1, 129, 2, 1, 8, 65),    // window just above a block, last block of 1 row
};

TEST(KernelAttention, ForwardMatchesNaive) {
  for (const AttnShape& sh : kShapes) {
    AttnCase c(sh);
    Vec out_ref, lse_ref;
    naive_attention(c.q, c.k, c.v, c.s, c.scale, out_ref, lse_ref);
    Vec out(out_ref.size(), kNaN), lse(lse_ref.size(), kNaN);
    attention_forward<double>(c.q.data(), c.k.data(), c.v.data(), out.data(), lse.data(), c.s,
                              c.scale);
    expect_close(out, out_ref, 1e-9, c.name() + " out");
    expect_close(lse, lse_ref, 1e-9, c.name() + " lse");

    auto qf = cast<float>(c.q), kf = cast<float>(c.k), vf = cast<float>(c.v);
    std::vector<float> outf(out.size()), lsef(lse.size());
    attention_forward<float>(qf.data(), kf.data(), vf.data(), outf.data(), lsef.data(), c.s,
                             float(c.scale));
    expect_close(outf, out_ref, 1e-5, c.name() + " float out");
    expect_close(lsef, lse_ref, 1e-5, c.name() + " float lse");
  }
}

struct Grads {
  Vec dq, dk, dv;
};

Grads run_backward(const AttnCase& c, const Vec& w) {
  Vec out(w.size()), lse(c.s.B * c.s.H * c.s.T);
  attention_forward<double>(c.q.data(), c.k.data(), c.v.data(), out.data(), lse.data(), c.s,
                            c.scale);
  Grads g{Vec(c.q.size(), kNaN), Vec(c.k.size(), kNaN), Vec(c.v.size(), kNaN)};
  attention_backward<double>(c.q.data(), c.k.data(), c.v.data(), out.data(), lse.data(), w.data(),
                             g.dq.data(), g.dk.data(), g.dv.data(), c.s, c.scale);
  return g;
}

TEST(KernelAttention, BackwardMatchesFiniteDifferences) {
  for (const AttnShape& sh : kShapes) {
    AttnCase c(sh, 7);
    const Vec w = randn(c.q.size(), 99);
    const Grads g = run_backward(c, w);
    // The objective uses the naive forward, so the check is independent of the kernel forward.
    auto objective = [&] {
      Vec out, lse;
      naive_attention(c.q, c.k, c.v, c.s, c.scale, out, lse);
      return dot(w, out);
    };
    const size_t probes = sh.T > 64 ? 400 : 5000;
    check_fd(c.q, objective, g.dq, c.name() + " dq", probes);
    check_fd(c.k, objective, g.dk, c.name() + " dk", probes);
    check_fd(c.v, objective, g.dv, c.name() + " dv", probes);
  }
}

TEST(KernelAttention, FloatBackwardAgreesWithDouble) {
  for (const AttnShape& sh : {kShapes[0], kShapes[6]}) {
    AttnCase c(sh, 8);
    const Vec w = randn(c.q.size(), 98);
    const Grads g = run_backward(c, w);
    auto qf = cast<float>(c.q), kf = cast<float>(c.k), vf = cast<float>(c.v), wf = cast<float>(w);
    std::vector<float> out(qf.size()), lse(c.s.B * c.s.H * c.s.T);
    attention_forward<float>(qf.data(), kf.data(), vf.data(), out.data(), lse.data(), c.s,
                             float(c.scale));
    std::vector<float> dq(qf.size()), dk(kf.size()), dv(vf.size());
    attention_backward<float>(qf.data(), kf.data(), vf.data(), out.data(), lse.data(), wf.data(),
                              dq.data(), dk.data(), dv.data(), c.s, float(c.scale));
    expect_close(dq, g.dq, 2e-5, c.name() + " float dq");
    expect_close(dk, g.dk, 2e-5, c.name() + " float dk");
    expect_close(dv, g.dv, 2e-5, c.name() + " float dv");
  }
}

TEST(KernelAttention, BitwiseDeterministicAcrossThreadCounts) {
  AttnCase c(shape(2, 150, 4, 2, 16, 40), 9);
  auto qf = cast<float>(c.q), kf = cast<float>(c.k), vf = cast<float>(c.v);
  const auto wf = cast<float>(randn(c.q.size(), 97));
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(qf.size()), lse(c.s.B * c.s.H * c.s.T);
    attention_forward<float>(qf.data(), kf.data(), vf.data(), out.data(), lse.data(), c.s,
                             float(c.scale));
    std::vector<float> dq(qf.size()), dk(kf.size()), dv(vf.size());
    attention_backward<float>(qf.data(), kf.data(), vf.data(), out.data(), lse.data(), wf.data(),
                              dq.data(), dk.data(), dv.data(), c.s, float(c.scale));
    std::vector<float> all = out;
    for (auto* part : {&lse, &dq, &dk, &dv}) all.insert(all.end(), part->begin(), part->end());
    return all;
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), three = run(3), again = run(3);
  omp_set_num_threads(saved);
  EXPECT_TRUE(one == three) << "results depend on the thread count";
  EXPECT_TRUE(three == again) << "results differ between identical runs";
}

}  // namespace
}  // namespace vt::cpu
