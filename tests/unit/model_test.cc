// GPT: which parameters each value mode owns, the aligned BoV init (its first forward equals
// x0v's), layout-independent init slices, and basic loss sanity at init.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/arena.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "model/flops.h"
#include "model/block_shape.h"
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

// Gives every layer the same non-zero W_O (W_O starts at zero, which would hide the value path).
void nonzero_wo(Built& b) {
  for (int i = 0; i < b.model->config().n_layer; ++i) {
    Tensor wo = b.store.param("blocks." + std::to_string(i) + ".attn.wo");
    Rng r(100 + i);
    for (int64_t j = 0; j < wo.numel(); ++j) wo.f32()[j] = r.normal(0, 0.1);
  }
}

ModelConfig with_coef(ValueMode mode, const std::string& layers, double coef) {
  ModelConfig c = tiny(mode);
  c.value_layers = layers;
  c.value_coef_fixed = true;
  c.value_coef = coef;
  EXPECT_TRUE(c.finalize().ok());
  return c;
}

// --value-coef NUMBER: no gain parameter, and v = NUMBER * source. v1 on every layer with
// coefficient 1 is SVFormer (BoV Table 1 row 3); a fixed x0v coefficient equals the learnable
// gain set to the same number.
TEST(Model, FixedValueCoefficient) {
  auto has = [](const Built& b, const std::string& n) { return b.store.find(n) >= 0; };
  auto v1 = build(with_coef(ValueMode::kV1, "all", 1.0), 11);
  auto sv = build(tiny(ValueMode::kSvformer), 11);
  for (int i = 1; i < 6; ++i) EXPECT_FALSE(has(*v1, "blocks." + std::to_string(i) + ".value.gain"));
  ASSERT_EQ(v1->store.infos().size(), sv->store.infos().size());
  for (const auto& p : sv->store.infos()) EXPECT_TRUE(has(*v1, p.name)) << p.name;
  auto v1b = build(with_coef(ValueMode::kV1, "all", 2.0), 11);
  for (Built* b : {v1.get(), sv.get(), v1b.get()}) nonzero_wo(*b);
  const double l1 = mean_loss(*v1->model, 2, 32, 3, 251);
  EXPECT_NEAR(l1, mean_loss(*sv->model, 2, 32, 3, 251), 1e-6 * l1);
  EXPECT_GT(std::fabs(l1 - mean_loss(*v1b->model, 2, 32, 3, 251)), 1e-5);

  auto fixed = build(with_coef(ValueMode::kX0v, "default", 0.75), 11);
  auto learn = build(tiny(ValueMode::kX0v), 11);
  EXPECT_FALSE(has(*fixed, "blocks.5.value.gain"));
  for (int i : {4, 5}) {
    Tensor g = learn->store.param("blocks." + std::to_string(i) + ".value.gain");
    g.f32()[0] = 0.75f;
  }
  for (Built* b : {fixed.get(), learn.get()}) nonzero_wo(*b);
  const double lf = mean_loss(*fixed->model, 2, 32, 3, 251);
  EXPECT_NEAR(lf, mean_loss(*learn->model, 2, 32, 3, 251), 1e-6 * lf);
}

// resformer-plus: the paper's init (default) a_k = ln(i_k) and a trainable scale s = L; BlaGPT's
// N(0, 0.1) logits; --plus-scale fixed registers no scale, and equals the learnable scale at L.
TEST(Model, ResformerPlusInitAndScale) {
  auto plus_cfg = [](const std::string& init, const std::string& scale) {
    ModelConfig c = tiny(ValueMode::kResformerPlus);
    c.plus_init = init;
    c.plus_scale = scale;
    EXPECT_TRUE(c.finalize().ok());
    return c;
  };
  auto paper = build(plus_cfg("", ""), 11);
  EXPECT_EQ(paper->model->config().plus_init, "paper");
  const std::vector<float> a = paper->store.param("value_plus.logits").to_host_f32();
  ASSERT_EQ(a.size(), 5u);
  for (int k = 0; k < 5; ++k) EXPECT_FLOAT_EQ(a[k], std::log(float(k + 1))) << k;
  EXPECT_EQ(paper->store.param("value_plus.scale").to_host_f32()[0], 6.0f);  // L
  auto bla = build(plus_cfg("blagpt", ""), 11);
  const std::vector<float> b = bla->store.param("value_plus.logits").to_host_f32();
  double ss = 0.0;
  for (float x : b) ss += double(x) * x;
  EXPECT_LT(std::sqrt(ss / 5), 0.4);  // N(0, 0.1), nowhere near ln(1..5)
  EXPECT_GT(ss, 0.0);
  auto fixed = build(plus_cfg("paper", "fixed"), 11);
  EXPECT_LT(fixed->store.find("value_plus.scale"), 0);
  for (Built* m : {paper.get(), fixed.get()}) nonzero_wo(*m);
  const double lp = mean_loss(*paper->model, 2, 32, 3, 251);
  EXPECT_NEAR(lp, mean_loss(*fixed->model, 2, 32, 3, 251), 1e-6 * lp);
  Tensor s = paper->store.param("value_plus.scale");
  s.f32()[0] = 3.0f;
  EXPECT_GT(std::fabs(lp - mean_loss(*paper->model, 2, 32, 3, 251)), 1e-5);
}

// resformer-hidden owns exactly the baseline's parameters and changes the loss; targeting layer 0
// alone changes nothing (its attention input is x0 already).
TEST(Model, ResformerHiddenMixesX0IntoTheAttentionInput) {
  auto hid = build(tiny(ValueMode::kResformerHidden), 11);
  auto base = build(tiny(ValueMode::kBaseline), 11);
  ModelConfig c0 = tiny(ValueMode::kResformerHidden);
  c0.value_layers = "0";
  ASSERT_TRUE(c0.finalize().ok());
  auto l0 = build(c0, 11);
  ASSERT_EQ(hid->store.infos().size(), base->store.infos().size());
  for (const auto& p : base->store.infos()) EXPECT_GE(hid->store.find(p.name), 0) << p.name;
  for (Built* b : {hid.get(), base.get(), l0.get()}) nonzero_wo(*b);
  const double lb = mean_loss(*base->model, 2, 32, 3, 251);
  EXPECT_GT(std::fabs(mean_loss(*hid->model, 2, 32, 3, 251) - lb), 1e-5);
  EXPECT_NEAR(mean_loss(*l0->model, 2, 32, 3, 251), lb, 1e-5 * lb);
}

// FLOPs follow the block shape: identity value/output projections do no matmul (sas: every W_O,
// the W_V of layers >= 1), a reparameterized projection multiplies one matrix (layer 0's W_V;
// every layer's W_V and W_O with --reparam-init; layer 0's W_O too with --proj-gains on), so
// SAS has 2 d^2 fewer matmul weights per layer >= 1 than prenorm and d^2 fewer in layer 0.
TEST(Model, MatmulWeightsFollowTheBlockShape) {
  ModelConfig pre = tiny(ValueMode::kBaseline);
  pre.n_kv_head = pre.n_head;
  ASSERT_TRUE(pre.finalize().ok());
  ModelConfig sas = pre;
  sas.block = BlockShapeKind::kSas;
  ASSERT_TRUE(sas.finalize().ok());
  const int64_t C = pre.n_embd;
  EXPECT_EQ(matmul_params(pre) - matmul_params(sas), int64_t{pre.n_layer - 1} * 2 * C * C + C * C);
  ModelConfig gains = sas;
  gains.proj_gains = true;
  ASSERT_TRUE(gains.finalize().ok());
  EXPECT_EQ(matmul_params(pre) - matmul_params(gains), int64_t{pre.n_layer - 1} * 2 * C * C);
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

// sas/sas-p as the official code builds them (bobby-he/simplified_transformers, model_utils.py
// with config/model/skipless.yaml): layer 0's W_V is s I + r dW (dW = 0, s = r = 1), every
// other W_V and every W_O the plain identity (no parameter at all); --proj-gains on restores
// vtrain's earlier layout (gains on the identities, layer 0's W_O reparameterized).
TEST(Model, SimplifiedProjectionsFollowTheOfficialCode) {
  auto has = [](const Built& b, const std::string& n) { return b.store.find(n) >= 0; };
  auto value = [](const Built& b, const std::string& n) {
    return b.store.param(n).f32()[0];
  };
  for (BlockShapeKind shape : {BlockShapeKind::kSas, BlockShapeKind::kSasP}) {
    ModelConfig c = tiny(ValueMode::kBaseline);
    c.block = shape;
    c.n_kv_head = c.n_head;
    ASSERT_TRUE(c.finalize().ok());
    auto m = build(c);
    EXPECT_TRUE(has(*m, "blocks.0.attn.wv"));
    EXPECT_FLOAT_EQ(value(*m, "blocks.0.attn.v_skip"), 1.0f);
    EXPECT_FLOAT_EQ(value(*m, "blocks.0.attn.v_resid"), 1.0f);
    Tensor dw = m->store.param("blocks.0.attn.wv");
    for (int64_t j = 0; j < dw.numel(); ++j) ASSERT_EQ(dw.f32()[j], 0.0f) << "dW starts at 0";
    for (int i = 0; i < c.n_layer; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".attn.";
      for (const char* n : {"wo", "o_skip", "o_resid"}) EXPECT_FALSE(has(*m, b + n)) << b + n;
      if (i > 0)
        for (const char* n : {"wv", "v_skip", "v_resid"}) EXPECT_FALSE(has(*m, b + n)) << b + n;
      EXPECT_TRUE(has(*m, b + "alpha"));
      EXPECT_FLOAT_EQ(value(*m, "blocks." + std::to_string(i) + ".mlp_gain"), 0.1f);
      Tensor wq = m->store.param(b + "wq");
      for (int64_t j = 0; j < wq.numel(); ++j) ASSERT_EQ(wq.f32()[j], 0.0f) << "W_Q starts at 0";
    }
    c.proj_gains = true;
    ASSERT_TRUE(c.finalize().ok());
    auto old = build(c);
    for (const char* n : {"wo", "o_skip", "o_resid", "v_skip", "v_resid"})
      EXPECT_TRUE(has(*old, std::string("blocks.0.attn.") + n)) << n;
    for (const char* n : {"v_skip", "o_skip"}) EXPECT_TRUE(has(*old, std::string("blocks.3.attn.") + n));
    EXPECT_FALSE(has(*old, "blocks.3.attn.wo"));
  }
  // --proj-gains is a sas/sas-p option, and --reparam-init already sets every projection.
  ModelConfig pre = tiny(ValueMode::kBaseline);
  pre.proj_gains = true;
  const absl::Status s = pre.finalize();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--proj-gains"), std::string::npos) << s.message();
  ModelConfig both = tiny(ValueMode::kBaseline);
  both.block = BlockShapeKind::kSas;
  both.n_kv_head = both.n_head;
  both.proj_gains = true;
  both.reparam_init = "id";
  const absl::Status sb = both.finalize();
  EXPECT_FALSE(sb.ok());
  EXPECT_NE(sb.message().find("--reparam-init"), std::string::npos) << sb.message();
}

// A sas/sas-p config written before --proj-gains existed (a checkpoint's, a case file's) has no
// "proj_gains": it describes the earlier layout, so reading it turns proj_gains on (and a
// resume of such a checkpoint with today's default is refused as another architecture).
TEST(Model, ConfigWithoutProjGainsIsTheEarlierLayout) {
  ModelConfig c = tiny(ValueMode::kBaseline);
  c.block = BlockShapeKind::kSas;
  c.n_kv_head = c.n_head;
  ASSERT_TRUE(c.finalize().ok());
  nlohmann::json j = c.to_json();
  EXPECT_EQ(j["proj_gains"], false);
  auto now = ModelConfig::from_json(j);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_FALSE(now->proj_gains);
  j.erase("proj_gains");
  auto before = ModelConfig::from_json(j);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->proj_gains);
  ModelConfig pre = tiny(ValueMode::kBaseline);
  nlohmann::json jp = pre.to_json();
  jp.erase("proj_gains");
  auto p = ModelConfig::from_json(jp);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->proj_gains);
}

// Value-SkipInit with the official code's inits (exp_scripts/baseline_comparison.sh: W_Q = 0,
// val_init_type=orth for W_V and W_O, skipless.yaml's MLP gain 0.1), QK-norm off by default.
TEST(Model, VSkipInitStartsAsPublished) {
  ModelConfig c = tiny(ValueMode::kBaseline);  // GQA: W_V is 64 x 32
  c.block = BlockShapeKind::kVSkipInit;
  ASSERT_TRUE(c.finalize().ok());
  EXPECT_FALSE(c.use_qk_norm());
  auto m = build(c);
  // Orthonormal columns (W^T W = I) of an R x K matrix with R >= K, or rows when R < K.
  auto check_orthogonal = [](const Tensor& w, int64_t R, int64_t K) {
    const bool cols = R >= K;
    const int64_t nv = cols ? K : R, len = cols ? R : K;
    for (int64_t a = 0; a < nv; ++a)
      for (int64_t b = 0; b <= a; ++b) {
        double dot = 0.0;
        for (int64_t t = 0; t < len; ++t)
          dot += cols ? double(w.f32()[t * K + a]) * w.f32()[t * K + b]
                      : double(w.f32()[a * K + t]) * w.f32()[b * K + t];
        ASSERT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << "," << b;
      }
  };
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    Tensor wq = m->store.param(b + "attn.wq");
    for (int64_t j = 0; j < wq.numel(); ++j) ASSERT_EQ(wq.f32()[j], 0.0f);
    check_orthogonal(m->store.param(b + "attn.wv"), c.n_embd, c.kv_dim());
    check_orthogonal(m->store.param(b + "attn.wo"), c.q_dim(), c.n_embd);
    EXPECT_FLOAT_EQ(m->store.param(b + "mlp_gain").f32()[0], 0.1f);
    EXPECT_FLOAT_EQ(m->store.param(b + "attn.alpha").f32()[0], 1.0f);
    EXPECT_FLOAT_EQ(m->store.param(b + "attn.beta").f32()[0], 0.0f);
  }
  // The aligned value tables read the same W_V the layer starts with.
  const std::vector<float> wv = initial_value_projection(c, 2, 5);
  Tensor w2 = m->store.param("blocks.2.attn.wv");
  ASSERT_EQ(static_cast<int64_t>(wv.size()), w2.numel());
  for (int64_t j = 0; j < w2.numel(); ++j) ASSERT_EQ(wv[j], w2.f32()[j]);
  // A tall and a wide draw are (semi-)orthogonal too.
  for (auto [R, K] : {std::pair<int64_t, int64_t>{48, 16}, {16, 48}}) {
    const std::vector<float> g = orthogonal_init(3, "x", R, K);
    Tensor t = Tensor::zeros({R, K});
    std::copy(g.begin(), g.end(), t.f32());
    check_orthogonal(t, R, K);
  }
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

// Deferred gradient zeroing in the store: begin_gradients() zeroes every gradient not named in
// set_overwrite_first (their alignment padding included) and leaves the named ones as they
// were; take_first_write is true once per named gradient and step, false for the rest;
// zero_unwritten(layer) zeroes only that layer's unwritten gradients; zero_grads() zeroes all and
// leaves none waiting.
TEST(ParamStore, DeferredZeroing) {
  ParamStore store;
  const int a = store.add("a", {3}, ParamGroup::kScalar);            // padded to 16
  const int w0 = store.add("w0", {4, 5}, ParamGroup::kMatrix, {}, {}, ParamMeta{0});
  const int g = store.add("g", {2}, ParamGroup::kGain, {}, {}, ParamMeta{0});
  const int w1 = store.add("w1", {4, 4}, ParamGroup::kMatrix, {}, {}, ParamMeta{1});
  const int head = store.add("head", {5}, ParamGroup::kLmHead);
  store.finalize();
  store.set_overwrite_first({w0, w1, head});
  std::vector<float> all(store.total_numel(), 7.0f);
  auto fill = [&] { store.grads_tensor().copy_from(Tensor::view(all.data(), {store.total_numel()})); };
  fill();
  store.begin_gradients();
  std::vector<float> after = store.grads_tensor().to_host_f32();
  auto in = [&](int p, int64_t i) {
    const ParamInfo& info = store.info(p);
    return i >= info.offset && i < info.offset + info.numel();
  };
  for (int64_t i = 0; i < store.total_numel(); ++i) {
    const bool kept = in(w0, i) || in(w1, i) || in(head, i);
    EXPECT_EQ(after[i], kept ? 7.0f : 0.0f) << "element " << i;
  }
  EXPECT_EQ(store.unwritten_count(), 3);
  EXPECT_FALSE(store.take_first_write(a));
  EXPECT_FALSE(store.take_first_write(g));
  EXPECT_TRUE(store.take_first_write(w0));
  EXPECT_FALSE(store.take_first_write(w0));
  store.zero_unwritten(0);  // w0 was written: untouched; w1 (layer 1) and head wait
  EXPECT_EQ(store.grad(w0).to_host_f32()[0], 7.0f);
  EXPECT_EQ(store.unwritten_count(), 2);
  store.zero_unwritten(-1);  // head
  EXPECT_EQ(store.grad(head).to_host_f32()[4], 0.0f);
  EXPECT_EQ(store.grad(w1).to_host_f32()[0], 7.0f);
  store.zero_unwritten();
  EXPECT_EQ(store.grad(w1).to_host_f32()[15], 0.0f);
  EXPECT_EQ(store.unwritten_count(), 0);
  EXPECT_FALSE(store.take_first_write(w1));
  fill();
  store.zero_grads();
  for (float v : store.grads_tensor().to_host_f32()) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(store.take_first_write(w0));
}

// The GEMM-written gradients GPT names: exactly the blocks' W_Q, W_K, W_V, W_O, fc and proj and
// lm_head; never an embedding, a value table, a scalar or another matrix (value-embed's gate
// matrix is written by its own op); under --fp8 e4m3 lm_head only.
TEST(Model, GemmWrittenGrads) {
  auto ends_with = [](const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  for (ValueMode mode : {ValueMode::kBaseline, ValueMode::kBov, ValueMode::kValueEmbed}) {
    auto b = build(tiny(mode));
    std::vector<int> want;
    for (int i = 0; i < b->store.size(); ++i) {
      const std::string& n = b->store.info(i).name;
      bool gemm = n == "lm_head";
      for (const char* t : {"attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.fc", "mlp.proj"})
        gemm = gemm || ends_with(n, t);
      if (gemm) want.push_back(i);
    }
    std::vector<int> ids = b->model->gemm_written_grads();
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, want) << value_mode_name(mode);
    EXPECT_GE(want.size(), 6u * 2 + 1) << value_mode_name(mode);
    b->model->set_fp8(true);
    EXPECT_EQ(b->model->gemm_written_grads(), std::vector<int>{b->store.find("lm_head")})
        << value_mode_name(mode);
  }
}

}  // namespace
}  // namespace vt
