// train/optimizer_setup: the coefficient groups each value mode and DenseFormer register their
// coefficients in, the groups' hyperparameters under --coef-optim paper (the papers' official
// code: RiddleHe/nanochat research/bank_of_values gpt_base.py setup_optimizer lines 1003 and
// 1005; the model's weights' settings for ResFormer and DenseFormer) and vtrain, nanochat's
// batch lr scaling (base_train.py lines 290-297, 311-318) under --lr-batch-scale nanochat, and
// --recipe bov turning it on. The expected numbers are docs/model.md's, written out here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "cli/recipes.h"
#include "cli/train_flags.h"
#include "core/arena.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "train/optimizer_setup.h"

namespace vt {
namespace {

std::map<std::string, ParamGroup> groups_of(const ModelConfig& c) {
  ParamStore store;
  GPT model(c);
  model.register_params(store);
  std::map<std::string, ParamGroup> out;
  for (const ParamInfo& p : store.infos()) out[p.name] = p.group;
  return out;
}

TEST(CoefGroups, EachModeRegistersItsCoefficientsInItsPapersGroup) {
  struct Case {
    ValueMode mode;
    std::string name;
    ParamGroup group;
  };
  const std::vector<Case> cases = {
      {ValueMode::kV1, "blocks.5.value.gain", ParamGroup::kCoefSkip},
      {ValueMode::kX0v, "blocks.5.value.gain", ParamGroup::kCoefSkip},
      {ValueMode::kBov, "blocks.5.value.gain", ParamGroup::kCoefSkip},
      {ValueMode::kBovAdd, "blocks.5.value.a", ParamGroup::kCoefMain},
      {ValueMode::kBovAdd, "blocks.5.value.b", ParamGroup::kCoefSkip},
      {ValueMode::kResformerLearnable, "blocks.3.value.lambda1", ParamGroup::kCoefModel},
      {ValueMode::kResformerLearnable, "blocks.3.value.lambda2", ParamGroup::kCoefModel},
      {ValueMode::kResformerPlus, "value_plus.logits", ParamGroup::kCoefModel},
      {ValueMode::kResformerPlus, "value_plus.scale", ParamGroup::kCoefModel},
      {ValueMode::kResformerPlus, "blocks.2.value.lambda2", ParamGroup::kCoefModel},
      {ValueMode::kResformerDense, "blocks.4.value.dense", ParamGroup::kCoefModel},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const auto g = groups_of(testing::tiny_config(k.mode));
    ASSERT_TRUE(g.count(k.name));
    EXPECT_EQ(g.at(k.name), k.group) << param_group_name(g.at(k.name));
  }
  ModelConfig dense = testing::tiny_config(ValueMode::kBaseline);
  dense.dense = true;
  ASSERT_TRUE(dense.finalize().ok());
  EXPECT_EQ(groups_of(dense).at("blocks.2.dwa"), ParamGroup::kCoefModel);
  // Nothing the models register is left in the plain scalar group.
  for (ValueMode m : all_value_modes())
    for (const auto& [name, g] : groups_of(testing::tiny_config(m)))
      EXPECT_NE(g, ParamGroup::kScalar) << name;
}

TrainOptions options(int64_t d_model = 768) {
  TrainOptions o;
  o.model = testing::tiny_config(ValueMode::kBov);
  o.model.n_embd = static_cast<int>(d_model);
  o.global_batch = 524288;
  return o;
}

void expect_hyper(const optim::AdamWHyper& h, double lr, double b1, double b2, double wd,
                  double eps) {
  EXPECT_NEAR(h.lr, lr, 1e-12 * lr);
  EXPECT_EQ(h.beta1, b1);
  EXPECT_EQ(h.beta2, b2);
  EXPECT_EQ(h.weight_decay, wd);
  EXPECT_EQ(h.eps, eps);
}

TEST(CoefGroups, PaperSettingsByDefault) {
  const optim::OptimizerConfig oc = optimizer_config(options());
  // gpt_base.py line 1005: beta/gamma_v at scalar_lr, betas (0.96, 0.95), no decay.
  expect_hyper(oc.adamw.coef_skip, 0.5, 0.96, 0.95, 0.0, 1e-10);
  // gpt_base.py line 1003: alpha at scalar_lr * 0.01, betas (0.8, 0.95), decay 0.05.
  expect_hyper(oc.adamw.coef_main, 0.005, 0.8, 0.95, 0.05, 1e-10);
  // ResFormer's and DenseFormer's coefficients: the matrices' lr, the official betas and eps.
  expect_hyper(oc.adamw.coef_model, 0.02, 0.9, 0.95, 0.0, 1e-8);
  expect_hyper(oc.adamw.scalar, 0.5, 0.8, 0.95, 0.0, 1e-10);
}

TEST(CoefGroups, VtrainOptionPutsEveryCoefficientInTheScalarGroup) {
  TrainOptions o = options();
  o.coef_optim = CoefOptim::kVtrain;
  o.scalar_lr = 0.3;
  o.lr_scale = 2.0;
  const optim::OptimizerConfig oc = optimizer_config(o);
  for (const optim::AdamWHyper* h : {&oc.adamw.coef_main, &oc.adamw.coef_skip,
                                     &oc.adamw.coef_model})
    expect_hyper(*h, 0.6, 0.8, 0.95, 0.0, 1e-10);
}

TEST(CoefGroups, ScalarAndMatrixLrsCarryOver) {
  TrainOptions o = options();
  o.scalar_lr = 0.2;
  o.matrix_lr = 0.04;
  o.lr_scale = 0.5;
  const optim::OptimizerConfig oc = optimizer_config(o);
  EXPECT_NEAR(oc.adamw.coef_skip.lr, 0.1, 1e-15);
  EXPECT_NEAR(oc.adamw.coef_main.lr, 0.001, 1e-15);
  EXPECT_NEAR(oc.adamw.coef_model.lr, 0.02, 1e-15);
  EXPECT_NEAR(oc.muon.lr, 0.02, 1e-15);
}

TEST(CoefGroups, AdamwOptimizerTrainsCoefficientsWithTheModelsAdamw) {
  TrainOptions o = options();
  o.optimizer = OptimizerKind::kAdamW;
  o.adamw_lr = 3e-4;
  const optim::OptimizerConfig oc = optimizer_config(o);
  for (const optim::AdamWHyper* h : {&oc.adamw.coef_main, &oc.adamw.coef_skip,
                                     &oc.adamw.coef_model})
    expect_hyper(*h, 3e-4, 0.9, 0.999, 0.0, 1e-8);
}

TEST(LrBatchScale, NoneLeavesTheLrs) {
  TrainOptions o = options();
  o.global_batch = 1 << 20;
  EXPECT_EQ(lr_batch_scale(o), 1.0);
  EXPECT_EQ(optimizer_config(o).muon.lr, 0.02);
}

// The BoV paper's 780M rows (Table 8): B = 2^20 tokens gives Muon 0.02 sqrt(2) = 0.0283 and the
// scalar lr 0.5 sqrt(2) = 0.707; every group base_train.py scales follows, the smear gate's
// constant 0.2 (gpt_base.py line 997) and vtrain's gains do not.
TEST(LrBatchScale, NanochatScalesEveryGroupButTheSmearGateAndGains) {
  TrainOptions o = options(1536);
  o.lr_batch_scale = NanochatScale::kNanochat;
  o.global_batch = 1 << 20;
  const double s = std::sqrt(2.0);
  EXPECT_NEAR(lr_batch_scale(o), s, 1e-15);
  const optim::OptimizerConfig oc = optimizer_config(o);
  const optim::OptimizerConfig base = optimizer_config(options(1536));
  EXPECT_NEAR(oc.muon.lr, 0.0283, 1e-4);
  EXPECT_NEAR(oc.adamw.scalar.lr, 0.707, 1e-3);
  EXPECT_NEAR(oc.adamw.coef_skip.lr, 0.707, 1e-3);
  EXPECT_NEAR(oc.adamw.coef_main.lr, 0.00707, 1e-5);
  EXPECT_NEAR(oc.adamw.coef_model.lr, 0.0283, 1e-4);
  for (auto pick : {&optim::AdamWConfig::embedding, &optim::AdamWConfig::lm_head,
                    &optim::AdamWConfig::value_table})
    EXPECT_NEAR((oc.adamw.*pick).lr, s * (base.adamw.*pick).lr, 1e-12);
  EXPECT_EQ(oc.adamw.smear.lr, base.adamw.smear.lr);
  EXPECT_EQ(oc.adamw.gain.lr, base.adamw.gain.lr);
  // At nanochat's reference batch the factor is 1.
  o.global_batch = 524288;
  EXPECT_EQ(optimizer_config(o).muon.lr, 0.02);
}

TEST(LrBatchScale, RecipeBovTurnsItOn) {
  std::vector<std::string> applied;
  auto args = expand_recipe({"--data", "d", "--recipe", "bov"}, &applied);
  ASSERT_TRUE(args.ok());
  EXPECT_NE(std::find(applied.begin(), applied.end(), "--lr-batch-scale nanochat"), applied.end());
  EXPECT_NE(std::find(applied.begin(), applied.end(), "--coef-optim paper"), applied.end());
  auto f = Flags::parse(train_command(), *args);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->get_string("lr-batch-scale"), "nanochat");
  EXPECT_EQ(f->get_string("coef-optim"), "paper");
}

}  // namespace
}  // namespace vt
