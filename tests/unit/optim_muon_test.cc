// Muon: Newton-Schulz output is nearly orthogonal (singular values from the eigenvalues of
// X X^T), transposition symmetry, scale invariance, the aspect scale, and a full Muon step
// checked against momentum / newton_schulz / decay composed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "core/communicator.h"
#include "core/tensor.h"
#include "optim/distributed_optimizer.h"
#include "optim/muon.h"
#include "parallel/process_grid.h"

namespace vt::optim {
namespace {

std::vector<float> randn(int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal());
  return v;
}

// Eigenvalues of a symmetric n x n matrix (cyclic Jacobi, double).
std::vector<double> sym_eigenvalues(std::vector<double> a, int n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-24) break;
    for (int p = 0; p < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> ev(n);
  for (int i = 0; i < n; ++i) ev[i] = a[i * n + i];
  std::sort(ev.begin(), ev.end());
  return ev;
}

// Singular values of X (rows x cols) via the eigenvalues of the min x min Gram matrix.
std::vector<double> singular_values(const std::vector<float>& x, int rows, int cols) {
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;
  auto at = [&](int i, int k) -> double {  // element (i, k) of the m x n orientation
    return tall ? x[static_cast<int64_t>(k) * cols + i] : x[static_cast<int64_t>(i) * cols + k];
  };
  std::vector<double> g(static_cast<size_t>(m) * m, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += at(i, k) * at(j, k);
      g[i * m + j] = s;
    }
  auto ev = sym_eigenvalues(g, m);
  for (auto& e : ev) e = std::sqrt(std::max(e, 0.0));
  return ev;
}

struct Bounds {
  double lo, hi;
};

void check_orthogonal(int rows, int cols, NsKind kind, Bounds b, uint64_t seed) {
  auto g = randn(static_cast<int64_t>(rows) * cols, seed);
  std::vector<float> x(g.size());
  newton_schulz(g.data(), rows, cols, x.data(), 5, NsCoefficients::of(kind));
  auto sv = singular_values(x, rows, cols);
  EXPECT_GE(sv.front(), b.lo) << rows << "x" << cols << " " << ns_kind_name(kind);
  EXPECT_LE(sv.back(), b.hi) << rows << "x" << cols << " " << ns_kind_name(kind);
}

TEST(NewtonSchulz, StandardCoefficientsGiveNearlyOrthogonalOutput) {
  // Gaussian inputs of aspect 1/3 .. 1/8 keep their singular values away from 0; the quintic maps
  // them into roughly [0.68, 1.13] (float64 numpy over many draws), Polar Express into
  // [0.86, 1.14].
  check_orthogonal(32, 96, NsKind::kStandard, {0.65, 1.2}, 1);
  check_orthogonal(96, 32, NsKind::kStandard, {0.65, 1.2}, 2);
  check_orthogonal(16, 128, NsKind::kStandard, {0.65, 1.2}, 3);
  check_orthogonal(200, 24, NsKind::kStandard, {0.65, 1.2}, 4);
}

TEST(NewtonSchulz, PolarExpressIsCloserToOrthogonal) {
  check_orthogonal(32, 96, NsKind::kPolarExpress, {0.83, 1.16}, 5);
  check_orthogonal(96, 32, NsKind::kPolarExpress, {0.83, 1.16}, 6);
  check_orthogonal(16, 128, NsKind::kPolarExpress, {0.83, 1.16}, 7);
}

TEST(NewtonSchulz, SquareMatrixSingularValuesAreBounded) {
  // A square Gaussian matrix has singular values near 0, which 5 iterations cannot lift all the
  // way: only the upper bound and the bulk are checked.
  auto g = randn(64 * 64, 8);
  std::vector<float> x(g.size());
  newton_schulz(g.data(), 64, 64, x.data(), 5, NsCoefficients::standard());
  auto sv = singular_values(x, 64, 64);
  EXPECT_LE(sv.back(), 1.25);
  EXPECT_GE(sv[sv.size() / 8], 0.65);  // all but the smallest eighth
}

TEST(NewtonSchulz, TransposedInputGivesTransposedOutput) {
  for (NsKind kind : {NsKind::kStandard, NsKind::kPolarExpress}) {
    const int rows = 24, cols = 40;
    auto g = randn(rows * cols, 9);
    std::vector<float> gt(g.size()), x(g.size()), xt(g.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) gt[c * rows + r] = g[r * cols + c];
    newton_schulz(g.data(), rows, cols, x.data(), 5, NsCoefficients::of(kind));
    newton_schulz(gt.data(), cols, rows, xt.data(), 5, NsCoefficients::of(kind));
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) ASSERT_EQ(xt[c * rows + r], x[r * cols + c]) << r << "," << c;
  }
  // Square: no transposition inside, so equal up to round-off only.
  const int n = 32;
  auto g = randn(n * n, 10);
  std::vector<float> gt(g.size()), x(g.size()), xt(g.size());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) gt[c * n + r] = g[r * n + c];
  newton_schulz(g.data(), n, n, x.data(), 5, NsCoefficients::standard());
  newton_schulz(gt.data(), n, n, xt.data(), 5, NsCoefficients::standard());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) EXPECT_NEAR(xt[c * n + r], x[r * n + c], 1e-4);
}

// The batched Newton-Schulz on CPU tensors: each matrix bit for bit the host function, whether
// the batch reads its inputs and writes its outputs as one tensor (one after another in memory)
// or matrix by matrix, over batch caps that cut a shape's group into several batches.
TEST(NewtonSchulz, BatchedIsTheHostFunctionBitForBit) {
  const std::vector<std::pair<int, int>> shapes = {{8, 20}, {20, 8}, {8, 20}, {20, 8},
                                                   {12, 12}, {12, 12}, {8, 20}, {5, 3}};
  int64_t total = 0;
  for (const auto& [r, c] : shapes) total += int64_t{r} * c;
  for (NsKind kind : {NsKind::kStandard, NsKind::kPolarExpress}) {
    const NsCoefficients co = NsCoefficients::of(kind);
    for (bool one_tensor : {false, true}) {
      for (int64_t cap : {kNsBatchElements, int64_t{2 * 8 * 20}, int64_t{1}}) {
        SCOPED_TRACE(::testing::Message() << ns_kind_name(kind) << " one tensor " << one_tensor
                                          << " cap " << cap);
        // one_tensor: the matrices of each shape follow each other in memory, in list order (the
        // list grouped by shape); otherwise each matrix has its own tensors.
        std::vector<std::pair<int, int>> order = shapes;
        if (one_tensor)
          std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
            auto first = [&](const std::pair<int, int>& s) {
              return std::find(shapes.begin(), shapes.end(), s) - shapes.begin();
            };
            return first(a) < first(b);
          });
        const Tensor in_all = Tensor::empty({total}), out_all = Tensor::empty({total});
        std::vector<NsMatrix> ms;
        std::vector<std::vector<float>> g;
        int64_t at = 0;
        for (size_t i = 0; i < order.size(); ++i) {
          const auto [r, c] = order[i];
          const int64_t n = int64_t{r} * c;
          g.push_back(randn(n, 40 + i));
          Tensor in = one_tensor ? in_all.flat(at, n) : Tensor::empty({n});
          Tensor out = one_tensor ? out_all.flat(at, n) : Tensor::empty({n});
          at += n;
          std::copy(g.back().begin(), g.back().end(), in.f32());
          std::fill(out.f32(), out.f32() + n, std::nanf(""));
          ms.push_back({in, r, c, out});
        }
        newton_schulz_batched(ms, 5, co, DType::kF32, cap);
        for (size_t i = 0; i < order.size(); ++i) {
          const auto [r, c] = order[i];
          std::vector<float> want(g[i].size());
          newton_schulz(g[i].data(), r, c, want.data(), 5, co);
          EXPECT_EQ(ms[i].out.to_host_f32(), want) << "matrix " << i << " " << r << "x" << c;
          EXPECT_EQ(ms[i].in.to_host_f32(), g[i]) << "input written";
        }
      }
    }
  }
}

TEST(NewtonSchulz, InvariantToInputScale) {
  const int rows = 20, cols = 36;
  auto g = randn(rows * cols, 11);
  std::vector<float> g2(g.size()), x(g.size()), x2(g.size());
  for (size_t i = 0; i < g.size(); ++i) g2[i] = 1e-3f * g[i];
  newton_schulz(g.data(), rows, cols, x.data(), 5, NsCoefficients::standard());
  newton_schulz(g2.data(), rows, cols, x2.data(), 5, NsCoefficients::standard());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(x[i], x2[i], 1e-4);
}

TEST(NewtonSchulz, CoefficientTables) {
  auto s = NsCoefficients::standard();
  ASSERT_EQ(s.abc.size(), 1u);
  EXPECT_DOUBLE_EQ(s.at(4)[0], 3.4445);
  EXPECT_DOUBLE_EQ(s.at(0)[1], -4.7750);
  EXPECT_DOUBLE_EQ(s.at(2)[2], 2.0315);
  EXPECT_DOUBLE_EQ(s.norm_eps, 1e-7);
  auto p = NsCoefficients::polar_express();
  ASSERT_EQ(p.abc.size(), 5u);
  EXPECT_DOUBLE_EQ(p.at(0)[0], 8.156554524902461);
  EXPECT_DOUBLE_EQ(p.at(4)[2], 0.42323551169305323);
  EXPECT_EQ(p.at(7), p.at(4));  // past the table: last row
}

TEST(Muon, AspectScale) {
  EXPECT_DOUBLE_EQ(muon_scale(768, 3072, MuonAspect::kFanOutOverFanIn), 2.0);  // W_fc (in, out)
  EXPECT_DOUBLE_EQ(muon_scale(3072, 768, MuonAspect::kFanOutOverFanIn), 1.0);  // W_proj
  EXPECT_DOUBLE_EQ(muon_scale(768, 768, MuonAspect::kFanOutOverFanIn), 1.0);
  EXPECT_DOUBLE_EQ(muon_scale(3072, 768, MuonAspect::kRowsOverCols), 2.0);
  EXPECT_DOUBLE_EQ(muon_scale(768, 3072, MuonAspect::kRowsOverCols), 1.0);
}

TEST(Muon, StepsMatchTheComposedFormula) {
  ParamStore store;
  store.add("fc", {6, 10}, ParamGroup::kMatrix);    // wide
  store.add("proj", {10, 6}, ParamGroup::kMatrix);  // tall
  store.finalize();
  OptimizerConfig cfg = OptimizerConfig::defaults(768);
  cfg.muon.weight_decay = 0.1;
  cfg.schedule.warmup_steps = 2;  // lr multipliers 1/2, 1
  cfg.schedule.momentum_steps = 10;
  ProcessGrid grid(self_communicator(), GridShape{});
  DistributedOptimizer opt(&store, cfg, grid);
  const NsCoefficients ns = NsCoefficients::standard();

  std::vector<std::vector<double>> p(2), buf(2);
  for (int i = 0; i < 2; ++i) {
    auto init = randn(60, 100 + i);
    std::copy(init.begin(), init.end(), store.param(i).f32());
    p[i].assign(init.begin(), init.end());
    buf[i].assign(60, 0.0);
  }
  const double mults[2] = {0.5, 1.0}, moms[2] = {0.85, 0.86};
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 2; ++i) {
      auto g = randn(60, 200 + 10 * t + i);
      std::copy(g.begin(), g.end(), store.grad(i).f32());
    }
    // Expected: momentum and update in double, orthogonalization by newton_schulz on the
    // float Nesterov vector.
    for (int i = 0; i < 2; ++i) {
      const float* g = store.grad(i).f32();
      const double m = moms[t];
      std::vector<float> u(60), x(60);
      for (int k = 0; k < 60; ++k) {
        buf[i][k] = m * buf[i][k] + (1 - m) * g[k];
        u[k] = static_cast<float>((1 - m) * g[k] + m * buf[i][k]);
      }
      const auto& sh = store.info(i).shape;
      newton_schulz(u.data(), static_cast<int>(sh[0]), static_cast<int>(sh[1]), x.data(), 5, ns);
      const double scale = std::sqrt(std::max(1.0, static_cast<double>(sh[1]) / sh[0]));
      const double lr = 0.02 * mults[t];
      for (int k = 0; k < 60; ++k) p[i][k] = p[i][k] * (1 - lr * 0.1) - lr * scale * x[k];
    }
    const StepStats st = opt.step(t, 100);
    EXPECT_DOUBLE_EQ(st.lr_multiplier, mults[t]);
    EXPECT_NEAR(st.momentum, moms[t], 1e-12);
    for (int i = 0; i < 2; ++i) {
      const std::string& name = store.info(i).name;
      const Tensor b = opt.gather_state(name, "momentum_buffer");
      for (int k = 0; k < 60; ++k) {
        EXPECT_NEAR(store.param(i).f32()[k], p[i][k], 1e-5) << name << "[" << k << "] t=" << t;
        EXPECT_NEAR(b.f32()[k], buf[i][k], 1e-6);
      }
    }
  }
  EXPECT_EQ(opt.step_count(), 2);
}

// nanochat's cautious weight decay: the decay of lr * scale * wd_s (wd_s the cosine-scheduled
// coefficient) lands only where the orthogonalized update and the old weight agree in sign.
TEST(Muon, NanochatCautiousDecay) {
  ParamStore store;
  store.add("fc", {6, 10}, ParamGroup::kMatrix);  // wide: aspect scale sqrt(10/6)
  store.finalize();
  OptimizerConfig cfg = OptimizerConfig::defaults(768);
  cfg.muon.weight_decay = 0.28;
  cfg.muon.wd_style = MuonWdStyle::kNanochat;
  cfg.schedule.warmup_steps = 0;
  cfg.schedule.momentum_schedule = MomentumSchedule::kNanochat;
  ProcessGrid grid(self_communicator(), GridShape{});
  DistributedOptimizer opt(&store, cfg, grid);
  auto init = randn(60, 300);
  std::copy(init.begin(), init.end(), store.param(0).f32());
  auto g = randn(60, 301);
  std::copy(g.begin(), g.end(), store.grad(0).f32());
  const int64_t step = 25, total = 100;  // before the warmdown (starts at 35): lr multiplier 1
  const double m = 0.85 + 0.12 * 25 / 400;
  std::vector<float> u(60), x(60);
  for (int k = 0; k < 60; ++k) {
    const double b = (1 - m) * g[k];
    u[k] = static_cast<float>((1 - m) * g[k] + m * b);
  }
  newton_schulz(u.data(), 6, 10, x.data(), 5, NsCoefficients::standard());
  const double scale = std::sqrt(10.0 / 6.0), lr = 0.02;
  const double wd = 0.28 * 0.5 * (1 + std::cos(3.14159265358979323846 * 25 / 100));
  const StepStats st = opt.step(step, total);
  EXPECT_NEAR(st.momentum, m, 1e-15);
  EXPECT_NEAR(st.muon_weight_decay, wd, 1e-15);
  int decayed = 0;
  for (int k = 0; k < 60; ++k) {
    const bool agree = static_cast<double>(x[k]) * init[k] >= 0;
    decayed += agree;
    const double want = (agree ? init[k] * (1 - lr * scale * wd) : init[k]) - lr * scale * x[k];
    EXPECT_NEAR(store.param(0).f32()[k], want, 1e-6) << k;
  }
  EXPECT_GT(decayed, 10);  // both branches are exercised
  EXPECT_LT(decayed, 50);
}

// Newton-Schulz in bf16 (the GPU default): bf16 storage of X, A, B with fp32 GEMM accumulation.
// Each stored value carries 2^-9 relative rounding; five iterations of the quintic keep the
// result within a few percent of fp32 (nanochat's setting; 1.4e-2 measured here), and the output
// is still near-orthogonal: its singular values stay in NS5's band around 1.
TEST(NewtonSchulz, Bf16IterationStaysCloseToF32) {
  for (auto [rows, cols] : {std::pair{48, 80}, std::pair{96, 32}}) {
    std::vector<float> g(rows * cols);
    uint64_t s = 12345;
    for (float& x : g) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<float>(static_cast<int64_t>(s >> 40) % 2001 - 1000) / 1000.0f;
    }
    const Tensor G = Tensor::view(g.data(), {rows, cols});
    Tensor f32 = Tensor::zeros({rows, cols}), bf = Tensor::zeros({rows, cols});
    const NsCoefficients c = NsCoefficients::standard();
    newton_schulz(G, rows, cols, f32, 5, c, DType::kF32);
    newton_schulz(G, rows, cols, bf, 5, c, DType::kBF16);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < f32.numel(); ++i) {
      diff += std::pow(double(f32.f32()[i]) - bf.f32()[i], 2);
      norm += std::pow(double(f32.f32()[i]), 2);
    }
    std::printf("NS5 bf16 vs f32, %dx%d: relative Frobenius difference %.3g\n", rows, cols,
                std::sqrt(diff / norm));
    EXPECT_LT(std::sqrt(diff / norm), 5e-2) << rows << "x" << cols;
    EXPECT_GT(std::sqrt(diff / norm), 0.0) << "bf16 should round";
    // Near-orthogonal: X X^T (small side) has diagonal within NS5's band (~0.5..1.5).
    const int m = std::min(rows, cols);
    for (int a = 0; a < m; a += 7) {
      double d = 0;
      for (int k = 0; k < std::max(rows, cols); ++k) {
        const float v = rows <= cols ? bf.f32()[a * cols + k] : bf.f32()[k * cols + a];
        d += double(v) * v;
      }
      EXPECT_GT(d, 0.3) << a;
      EXPECT_LT(d, 1.7) << a;
    }
    // The distributed optimizer broadcasts bf16 results as bf16 (half the bytes), which loses
    // nothing only because every output is a bf16 value: check that, wide and tall.
    int64_t not_bf16 = 0;
    for (int64_t i = 0; i < bf.numel(); ++i)
      not_bf16 += bf16_to_f32(f32_to_bf16(bf.f32()[i])) != bf.f32()[i];
    EXPECT_EQ(not_bf16, 0) << rows << "x" << cols;
    int64_t f32_only = 0;  // and the f32 iteration's are not (the check can fail)
    for (int64_t i = 0; i < f32.numel(); ++i)
      f32_only += bf16_to_f32(f32_to_bf16(f32.f32()[i])) != f32.f32()[i];
    EXPECT_GT(f32_only, f32.numel() / 2);
  }
}

}  // namespace
}  // namespace vt::optim
