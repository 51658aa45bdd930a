// GPT: which parameters each value mode owns, the aligned BoV init (its first forward equals
// x0v's), layout-independent init slices, and basic loss sanity at init.
#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "model/flops.h"
#include "model/init.h"

namespace vt {
namespace {

ModelConfig tiny(ValueMode mode) { return testing::tiny_config(mode); }

struct Built {
  ParamStore store;
  std::unique_ptr<GPT> model;
};

std::unique_ptr<Built> build(const ModelConfig& c, uint64_t seed = 5) {
  auto b = std::make_unique<Built>();
  b->model = std::make_unique<GPT>(c);
  b->model->register_params(b->store);
  b->store.finalize();
  b->model->init_params(seed);
  return b;
}

double mean_loss(GPT& m, int B, int T, uint64_t seed, int vocab) {
  std::vector<int32_t> in(B * T), tg(B * T);
  Rng r(seed);
  for (int i = 0; i < B * T; ++i) {
    in[i] = r.next_u64() % vocab;
    tg[i] = r.next_u64() % vocab;
  }
  return m.forward_backward(in.data(), tg.data(), B, 1.0f, false) / (B * T);
}

TEST(Model, ModesOwnTheRightParameters) {
  auto has = [](const Built& b, const std::string& n) { return b.store.find(n) >= 0; };
  auto bov = build(tiny(ValueMode::kBov));
  EXPECT_TRUE(has(*bov, "blocks.3.attn.wv"));
  EXPECT_FALSE(has(*bov, "blocks.4.attn.wv"));
  EXPECT_TRUE(has(*bov, "blocks.4.value.table"));
  EXPECT_TRUE(has(*bov, "blocks.5.value.gain"));
  auto sv = build(tiny(ValueMode::kSvformer));
  EXPECT_TRUE(has(*sv, "blocks.0.attn.wv"));
  for (int i = 1; i < 6; ++i) EXPECT_FALSE(has(*sv, "blocks." + std::to_string(i) + ".attn.wv"));
  auto dense = build(tiny(ValueMode::kResformerDense));
  EXPECT_EQ(dense->store.info(dense->store.find("blocks.3.value.dense")).numel(), 4);
  auto plus = build(tiny(ValueMode::kResformerPlus));
  EXPECT_EQ(plus->store.info(plus->store.find("value_plus.logits")).numel(), 5);
  auto base = build(tiny(ValueMode::kBaseline));
  for (const auto& p : base->store.infos()) EXPECT_EQ(p.name.find("value"), std::string::npos);
  EXPECT_EQ(base->store.info(base->store.find("wte")).shape, (Shape{256, 64}));
}

TEST(Model, BovFirstForwardEqualsX0v) {
  auto bov = build(tiny(ValueMode::kBov), 11);
  auto x0v = build(tiny(ValueMode::kX0v), 11);
  auto base = build(tiny(ValueMode::kBaseline), 11);
  // W_O starts at zero, which would hide the value path entirely: give both models the same
  // non-zero output projections.
  for (auto* b : {bov.get(), x0v.get(), base.get()}) {
    for (int i = 0; i < 6; ++i) {
      Tensor wo = b->store.param("blocks." + std::to_string(i) + ".attn.wo");
      Rng r(100 + i);
      for (int64_t j = 0; j < wo.numel(); ++j) wo.f32()[j] = r.normal(0, 0.1);
    }
  }
  const double lb = mean_loss(*bov->model, 2, 32, 3, 251);
  const double lx = mean_loss(*x0v->model, 2, 32, 3, 251);
  const double l0 = mean_loss(*base->model, 2, 32, 3, 251);
  EXPECT_NEAR(lb, lx, 1e-5 * lx);
  EXPECT_GT(std::fabs(lb - l0), 1e-5) << "the value path must matter for this check to mean anything";
}

// FLOPs follow the block shape: identity value/output projections do no matmul (sas: layers
// >= 1), a reparameterized projection multiplies one matrix (layer 0; every layer with
// --reparam-init), so SAS has 2 d^2 fewer matmul weights per layer >= 1 than prenorm.
TEST(Model, MatmulWeightsFollowTheBlockShape) {
  ModelConfig pre = tiny(ValueMode::kBaseline);
  pre.n_kv_head = pre.n_head;
  ASSERT_TRUE(pre.finalize().ok());
  ModelConfig sas = pre;
  sas.block = BlockShapeKind::kSas;
  ASSERT_TRUE(sas.finalize().ok());
  const int64_t C = pre.n_embd;
  EXPECT_EQ(matmul_params(pre) - matmul_params(sas), int64_t{pre.n_layer - 1} * 2 * C * C);
  ModelConfig rep = sas;
  rep.reparam_init = "id";
  ASSERT_TRUE(rep.finalize().ok());
  EXPECT_EQ(matmul_params(rep), matmul_params(pre));
  // bov target layers (last third: 4, 5) have no W_V matmul either, on any shape.
  ModelConfig bov = sas;
  bov.value_mode = ValueMode::kBov;
  ASSERT_TRUE(bov.finalize().ok());
  EXPECT_EQ(matmul_params(bov), matmul_params(sas));  // identity V: nothing to remove
  ModelConfig pre_bov = pre;
  pre_bov.value_mode = ValueMode::kBov;
  ASSERT_TRUE(pre_bov.finalize().ok());
  EXPECT_EQ(matmul_params(pre) - matmul_params(pre_bov), 2 * C * C);
  EXPECT_LT(flops_per_token(sas), flops_per_token(pre));
}

// nanochat's weight-decay scaling from its scaling-parameter count (12 L d^2 block matrices plus
// the padded lm_head, written out here): 1 for d12 at nanochat's reference batch of 2^19 tokens.
TEST(Model, NanochatWeightDecayScale) {
  auto d12 = preset_config("d12"), d24 = preset_config("d24");
  ASSERT_TRUE(d12.ok() && d24.ok());
  ASSERT_TRUE(d12->finalize().ok() && d24->finalize().ok());
  auto s12 = nanochat_wd_scale(*d12, 524288);
  ASSERT_TRUE(s12.ok());
  EXPECT_NEAR(*s12, 1.0, 1e-12);
  const double p12 = 12.0 * 12 * 768 * 768 + 32768.0 * 768;
  const double p24 = 12.0 * 24 * 1536 * 1536 + 32768.0 * 1536;
  auto s24 = nanochat_wd_scale(*d24, 1048576);
  ASSERT_TRUE(s24.ok());
  EXPECT_NEAR(*s24, std::sqrt(2.0) * p12 / p24, 1e-12);
  EXPECT_NEAR(0.28 * *s24, 0.0598, 1e-4);  // the decay nanochat's d24 run trains with
}

TEST(Model, LossAtInitIsNearLogVocab) {
  auto m = build(tiny(ValueMode::kBaseline));
  const double l = mean_loss(*m->model, 2, 32, 9, 251);
  EXPECT_NEAR(l, std::log(251.0), 0.05);
}

TEST(Model, InitSlicesAreLayoutIndependent) {
  ModelConfig c = tiny(ValueMode::kValueEmbed);
  ParamInfo info;
  info.name = "blocks.1.attn.wq";
  info.global_shape = {64, 64};
  const InitRule rule = InitRule::uniform(-0.2, 0.2);
  auto global = generate_init(rule, info.name, 64 * 64, 3);
  // Column slice 32..63 (TP rank 1 of 2).
  info.shape = {64, 32};
  info.split = {1, 32};
  std::vector<float> local(64 * 32);
  copy_local_slice(global, info, local.data());
  for (int r = 0; r < 64; ++r)
    for (int col = 0; col < 32; ++col) ASSERT_EQ(local[r * 32 + col], global[r * 64 + 32 + col]);
  // Same name, same seed: same numbers; different seed: different numbers.
  EXPECT_EQ(generate_init(rule, info.name, 64 * 64, 3), global);
  EXPECT_NE(generate_init(rule, info.name, 64 * 64, 4), global);
  (void)c;
}

}  // namespace
}  // namespace vt
