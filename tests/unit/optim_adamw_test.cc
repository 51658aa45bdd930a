// AdamW: per-group hyperparameters and lr scaling, one and two steps checked against the formula
// evaluated by hand in double, state views and their layout.
#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "optim/adamw.h"

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

TEST(AdamW, StepsByHandForEveryGroup) {
  ParamStore store;
  store.add("wte", {5, 3}, ParamGroup::kEmbedding);
  store.add("lm_head", {3, 5}, ParamGroup::kLmHead);
  store.add("blocks.0.value.table", {5, 2}, ParamGroup::kValueTable);
  store.add("blocks.0.value.gain", {1}, ParamGroup::kScalar);
  store.add("blocks.0.attn.wq", {3, 3}, ParamGroup::kMatrix);  // not AdamW's
  store.finalize();
  const AdamWConfig cfg = AdamWConfig::defaults(128);
  AdamW opt(&store, cfg);

  std::vector<std::vector<Ref>> ref(store.size());
  for (int i = 0; i < store.size(); ++i) {
    float* p = store.param(i).f32();
    for (int64_t k = 0; k < store.info(i).numel(); ++k) {
      p[k] = 0.5f + 0.1f * static_cast<float>(k) - 0.3f * static_cast<float>(i);
      ref[i].push_back(Ref{p[k]});
    }
  }
  const double mults[3] = {0.25, 1.0, 0.5};
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < store.size(); ++i) {
      float* g = store.grad(i).f32();
      for (int64_t k = 0; k < store.info(i).numel(); ++k)
        g[k] = static_cast<float>(std::sin(1.0 + k + 7 * i + 13 * t));
    }
    opt.step(mults[t - 1]);
    EXPECT_EQ(opt.step_count(), t);
    for (int i = 0; i < store.size(); ++i) {
      const ParamInfo& info = store.info(i);
      const float* p = store.param(i).f32();
      const float* g = store.grad(i).f32();
      for (int64_t k = 0; k < info.numel(); ++k) {
        if (info.group == ParamGroup::kMatrix) {
          EXPECT_EQ(p[k], static_cast<float>(ref[i][k].p)) << "AdamW touched a Muon matrix";
          continue;
        }
        const AdamWHyper& h = cfg.for_group(info.group);
        ref[i][k].step(g[k], h, h.lr * mults[t - 1], t);
        EXPECT_NEAR(p[k], ref[i][k].p, 2e-6 * std::max(1.0, std::abs(ref[i][k].p)))
            << info.name << "[" << k << "] step " << t;
        EXPECT_NEAR(opt.state(info.name, "exp_avg").f32()[k], ref[i][k].m, 1e-6);
        EXPECT_NEAR(opt.state(info.name, "exp_avg_sq").f32()[k], ref[i][k].v, 1e-6);
      }
    }
  }
}

TEST(AdamW, FirstStepIsSignDescentPlusDecay) {
  // At t = 1 the bias-corrected m / sqrt(v) is g / |g|: p1 = p0 (1 - lr wd) - lr sign(g).
  ParamStore store;
  store.add("wte", {4}, ParamGroup::kEmbedding);
  store.finalize();
  AdamWConfig cfg;
  AdamW opt(&store, cfg);
  const float p0[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  const float g0[4] = {0.1f, -3.0f, 2e-3f, -7.0f};
  for (int k = 0; k < 4; ++k) {
    store.param(0).f32()[k] = p0[k];
    store.grad(0).f32()[k] = g0[k];
  }
  opt.step(1.0);
  const double lr = 0.3, wd = 0.001;
  for (int k = 0; k < 4; ++k) {
    const double expect = p0[k] * (1 - lr * wd) - lr * (g0[k] > 0 ? 1 : -1);
    EXPECT_NEAR(store.param(0).f32()[k], expect, 1e-6) << k;
  }
}

TEST(AdamW, StatesShareTheParamStoreLayout) {
  ParamStore store;
  store.add("a", {3}, ParamGroup::kScalar);
  store.add("m", {2, 2}, ParamGroup::kMatrix);
  store.add("b", {17}, ParamGroup::kValueTable);
  store.finalize();
  AdamW opt(&store, AdamWConfig{});
  EXPECT_EQ(opt.state("a", "exp_avg").f32(), opt.exp_avg_data() + store.info(0).offset);
  EXPECT_EQ(opt.state("b", "exp_avg_sq").f32(), opt.exp_avg_sq_data() + store.info(2).offset);
  EXPECT_EQ(opt.state("b", "exp_avg").shape(), (Shape{17}));
  ASSERT_EQ(AdamW::state_kinds().size(), 2u);
  // Writable views (checkpoint loading), and set_step_count continues bias correction.
  opt.state("a", "exp_avg").f32()[0] = 0.7f;
  opt.set_step_count(10);
  store.grad("a").f32()[0] = 0.0f;
  opt.step(1.0);
  EXPECT_EQ(opt.step_count(), 11);
  EXPECT_FLOAT_EQ(opt.state("a", "exp_avg").f32()[0], 0.8f * 0.7f);
}

}  // namespace
}  // namespace vt::optim
