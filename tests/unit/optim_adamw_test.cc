// AdamW: per-group hyperparameters and lr scaling, three steps of the optimizer checked against
// the formula evaluated by hand in double, states by name and the step count.
#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "core/communicator.h"
#include "optim/adamw.h"
#include "optim/distributed_optimizer.h"
#include "parallel/process_grid.h"

namespace vt::optim {
namespace {

TEST(AdamWConfig, ModelMdDefaultsAndWidthScaling) {
  AdamWConfig c = AdamWConfig::defaults(768);
  EXPECT_DOUBLE_EQ(c.embedding.lr, 0.3);
  EXPECT_DOUBLE_EQ(c.embedding.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.embedding.beta2, 0.995);
  EXPECT_DOUBLE_EQ(c.embedding.weight_decay, 0.001);
  EXPECT_DOUBLE_EQ(c.lm_head.lr, 0.008);
  EXPECT_DOUBLE_EQ(c.lm_head.beta2, 0.96);
  EXPECT_DOUBLE_EQ(c.lm_head.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.value_table.lr, 0.15);
  EXPECT_DOUBLE_EQ(c.value_table.beta2, 0.995);
  EXPECT_DOUBLE_EQ(c.value_table.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.scalar.lr, 0.5);
  EXPECT_DOUBLE_EQ(c.scalar.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.scalar.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(c.scalar.eps, 1e-10);

  AdamWConfig w = AdamWConfig::defaults(1536);  // (1536/768)^-0.5 = 1/sqrt(2)
  EXPECT_NEAR(w.embedding.lr, 0.3 / std::sqrt(2.0), 1e-15);
  EXPECT_NEAR(w.lm_head.lr, 0.008 / std::sqrt(2.0), 1e-15);
  EXPECT_NEAR(w.value_table.lr, 0.15 / std::sqrt(2.0), 1e-15);
  EXPECT_DOUBLE_EQ(w.scalar.lr, 0.5);  // scalars are not scaled
  EXPECT_EQ(&w.for_group(ParamGroup::kLmHead), &w.lm_head);
}

// The formula of adamw.h in double.
struct Ref {
  double p, m = 0, v = 0;
  void step(double g, const AdamWHyper& h, double lr, int t) {
    p *= 1 - lr * h.weight_decay;
    m = h.beta1 * m + (1 - h.beta1) * g;
    v = h.beta2 * v + (1 - h.beta2) * g * g;
    const double mh = m / (1 - std::pow(h.beta1, t));
    const double vh = v / (1 - std::pow(h.beta2, t));
    p -= lr * mh / (std::sqrt(vh) + h.eps);
  }
};

// The optimizer (DistributedOptimizer on a 1-rank grid, as one process runs it) with the
// schedule's lr multiplier of each step.
struct OneRank {
  ProcessGrid grid{self_communicator(), GridShape{}};
  DistributedOptimizer opt;
  OneRank(ParamStore* store, const OptimizerConfig& cfg) : opt(store, cfg, grid) {}
};

TEST(AdamW, StepsByHandForEveryGroup) {
  ParamStore store;
  store.add("wte", {5, 3}, ParamGroup::kEmbedding);
  store.add("lm_head", {3, 5}, ParamGroup::kLmHead);
  store.add("blocks.0.value.table", {5, 2}, ParamGroup::kValueTable);
  store.add("blocks.0.value.gain", {1}, ParamGroup::kScalar);
  store.add("blocks.0.block.gains", {2}, ParamGroup::kGain);
  store.finalize();
  OptimizerConfig cfg = OptimizerConfig::defaults(128);
  cfg.schedule.warmup_steps = 4;  // lr multipliers 1/4, 2/4, 3/4
  OneRank one(&store, cfg);

  std::vector<std::vector<Ref>> ref(store.size());
  for (int i = 0; i < store.size(); ++i) {
    float* p = store.param(i).f32();
    for (int64_t k = 0; k < store.info(i).numel(); ++k) {
      p[k] = 0.5f + 0.1f * static_cast<float>(k) - 0.3f * static_cast<float>(i);
      ref[i].push_back(Ref{p[k]});
    }
  }
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < store.size(); ++i) {
      float* g = store.grad(i).f32();
      for (int64_t k = 0; k < store.info(i).numel(); ++k)
        g[k] = static_cast<float>(std::sin(1.0 + k + 7 * i + 13 * t));
    }
    const StepStats st = one.opt.step(t - 1, 100);
    EXPECT_DOUBLE_EQ(st.lr_multiplier, 0.25 * t);
    EXPECT_EQ(one.opt.step_count(), t);
    for (int i = 0; i < store.size(); ++i) {
      const ParamInfo& info = store.info(i);
      const float* p = store.param(i).f32();
      const float* g = store.grad(i).f32();
      const Tensor m = one.opt.gather_state(info.name, "exp_avg");
      const Tensor v = one.opt.gather_state(info.name, "exp_avg_sq");
      for (int64_t k = 0; k < info.numel(); ++k) {
        const AdamWHyper& h = cfg.adamw.for_group(info.group);
        ref[i][k].step(g[k], h, h.lr * st.lr_multiplier, t);
        EXPECT_NEAR(p[k], ref[i][k].p, 2e-6 * std::max(1.0, std::abs(ref[i][k].p)))
            << info.name << "[" << k << "] step " << t;
        EXPECT_NEAR(m.f32()[k], ref[i][k].m, 1e-6);
        EXPECT_NEAR(v.f32()[k], ref[i][k].v, 1e-6);
      }
    }
  }
}

TEST(AdamW, FirstStepIsSignDescentPlusDecay) {
  // At t = 1 the bias-corrected m / sqrt(v) is g / |g|: p1 = p0 (1 - lr wd) - lr sign(g).
  ParamStore store;
  store.add("wte", {4}, ParamGroup::kEmbedding);
  store.finalize();
  OptimizerConfig cfg = OptimizerConfig::defaults(768);
  cfg.schedule.warmup_steps = 0;
  OneRank one(&store, cfg);
  const float p0[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  const float g0[4] = {0.1f, -3.0f, 2e-3f, -7.0f};
  for (int k = 0; k < 4; ++k) {
    store.param(0).f32()[k] = p0[k];
    store.grad(0).f32()[k] = g0[k];
  }
  EXPECT_DOUBLE_EQ(one.opt.step(0, 100).lr_multiplier, 1.0);
  const double lr = 0.3, wd = 0.001;
  for (int k = 0; k < 4; ++k) {
    const double expect = p0[k] * (1 - lr * wd) - lr * (g0[k] > 0 ? 1 : -1);
    EXPECT_NEAR(store.param(0).f32()[k], expect, 1e-6) << k;
  }
}

TEST(AdamW, StatesByNameAndTheStepCountContinue) {
  ParamStore store;
  store.add("a", {3}, ParamGroup::kScalar);
  store.add("m", {2, 2}, ParamGroup::kMatrix);
  store.add("b", {17}, ParamGroup::kValueTable);
  store.finalize();
  OneRank one(&store, OptimizerConfig::defaults(768));
  EXPECT_EQ(one.opt.state_kinds("a"), adamw_state_kinds());
  EXPECT_EQ(one.opt.state_kinds("m"), muon_state_kinds());
  ASSERT_EQ(adamw_state_kinds().size(), 2u);
  EXPECT_EQ(one.opt.gather_state("b", "exp_avg").shape(), (Shape{17}));
  // States set by name (checkpoint loading), and set_step_count continues bias correction.
  Tensor m = Tensor::zeros({3});
  m.f32()[0] = 0.7f;
  one.opt.scatter_state("a", "exp_avg", m);
  one.opt.set_step_count(10);
  store.grad("a").f32()[0] = 0.0f;
  one.opt.step(50, 100);
  EXPECT_EQ(one.opt.step_count(), 11);
  EXPECT_FLOAT_EQ(one.opt.gather_state("a", "exp_avg").f32()[0], 0.8f * 0.7f);
}

}  // namespace
}  // namespace vt::optim
