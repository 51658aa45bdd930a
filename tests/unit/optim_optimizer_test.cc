// The optimizer on one process (DistributedOptimizer on a 1-rank grid over self_communicator(),
// as `vtrain train` runs without MPI) and clipping: dispatch of groups to AdamW/Muon, schedule
// values in the stats, grad norm (double, padding excluded, thread-count independent), optional
// clipping, states by name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/arena.h"
#include "core/communicator.h"
#include "core/rng.h"
#include "optim/clip.h"
#include "optim/distributed_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/process_grid.h"

namespace vt::optim {
namespace {

void fill(ParamStore& store, uint64_t seed, bool grads) {
  for (int i = 0; i < store.size(); ++i) {
    Rng r = Rng::for_name(seed, store.info(i).name);
    float* x = grads ? store.grad(i).f32() : store.param(i).f32();
    for (int64_t k = 0; k < store.info(i).numel(); ++k) x[k] = static_cast<float>(r.normal());
  }
}

ParamStore make_store() {
  ParamStore s;
  s.add("wte", {64, 16}, ParamGroup::kEmbedding);
  s.add("blocks.0.attn.wq", {16, 16}, ParamGroup::kMatrix);
  s.add("blocks.0.mlp.fc", {16, 64}, ParamGroup::kMatrix);
  s.add("blocks.0.mlp.proj", {64, 16}, ParamGroup::kMatrix);
  s.add("blocks.0.value.table", {64, 8}, ParamGroup::kValueTable);
  s.add("blocks.0.value.gain", {1}, ParamGroup::kScalar);
  s.add("lm_head", {16, 64}, ParamGroup::kLmHead);
  s.finalize();
  return s;
}

TEST(Clip, SumSquaresIsDoubleAndChunkIndependent) {
  const int64_t n = (1 << 17) + 123;  // several chunks
  std::vector<float> x(n);
  Rng r(3);
  for (auto& v : x) v = static_cast<float>(r.normal());
  double ref = 0;
  for (float v : x) ref += static_cast<double>(v) * v;
  EXPECT_NEAR(sum_squares(x.data(), n), ref, 1e-9 * ref);
  EXPECT_EQ(sum_squares(x.data(), 0), 0.0);
}

TEST(Clip, GradNormAndClipping) {
  ParamStore s = make_store();
  fill(s, 1, true);
  // Garbage in the alignment padding after the 1-element scalar must not count.
  s.grad_data()[s.info(5).offset + 1] = 1e6f;
  double ref = 0;
  for (int i = 0; i < s.size(); ++i)
    for (int64_t k = 0; k < s.info(i).numel(); ++k) ref += std::pow(s.grad(i).f32()[k], 2.0);
  ref = std::sqrt(ref);
  EXPECT_NEAR(grad_norm(s), ref, 1e-12 * ref);

  EXPECT_EQ(clip_scale(ref, 0.0), 1.0);        // off
  EXPECT_EQ(clip_scale(ref, 2 * ref), 1.0);    // below the threshold
  double applied = 0;
  const double before = clip_grad_norm(s, ref / 4, &applied);
  EXPECT_NEAR(before, ref, 1e-12 * ref);
  EXPECT_NEAR(applied, (ref / 4) / (before + 1e-6), 1e-15);
  EXPECT_NEAR(grad_norm(s), ref / 4, 1e-5 * ref);
}

TEST(Optimizer, DefaultsAndJson) {
  OptimizerConfig c = OptimizerConfig::defaults(768);
  EXPECT_DOUBLE_EQ(c.muon.lr, 0.02);
  EXPECT_DOUBLE_EQ(c.muon.weight_decay, 0.0);
  EXPECT_EQ(c.muon.ns_steps, 5);
  EXPECT_EQ(c.muon.ns, NsKind::kStandard);
  EXPECT_DOUBLE_EQ(c.max_grad_norm, 0.0);
  auto j = c.to_json();
  EXPECT_DOUBLE_EQ(j["adamw"]["lm_head"]["beta2"].get<double>(), 0.96);
  EXPECT_EQ(j["muon"]["ns"].get<std::string>(), "standard");
  EXPECT_EQ(j["schedule"]["warmup_steps"].get<int64_t>(), 40);
}

TEST(Optimizer, StepDispatchesGroupsAndReportsStats) {
  ParamStore s = make_store();
  fill(s, 7, false);
  std::vector<float> before(s.param_data(), s.param_data() + s.total_numel());
  OptimizerConfig cfg = OptimizerConfig::defaults(16);
  ProcessGrid grid(self_communicator(), GridShape{});
  DistributedOptimizer opt(&s, cfg, grid);
  fill(s, 8, true);
  const double norm = grad_norm(s);
  StepStats st = opt.step(0, 100);
  EXPECT_EQ(st.step, 0);
  EXPECT_DOUBLE_EQ(st.lr_multiplier, 1.0 / 40);
  EXPECT_DOUBLE_EQ(st.momentum, 0.85);
  EXPECT_DOUBLE_EQ(st.matrix_lr, 0.02 / 40);
  EXPECT_DOUBLE_EQ(st.grad_norm, norm);
  EXPECT_EQ(st.clip_scale, 1.0);
  EXPECT_EQ(opt.step_count(), 1);
  // Every parameter moved, and the states of each group are where they should be.
  for (int i = 0; i < s.size(); ++i) {
    const ParamInfo& info = s.info(i);
    bool moved = false;
    for (int64_t k = 0; k < info.numel(); ++k) moved |= s.param(i).f32()[k] != before[info.offset + k];
    EXPECT_TRUE(moved) << info.name;
    const auto& kinds = opt.state_kinds(info.name);
    if (info.group == ParamGroup::kMatrix) {
      ASSERT_EQ(kinds.size(), 1u);
      EXPECT_EQ(kinds[0], "momentum_buffer");
      // buf = 0.15 * g after one step.
      EXPECT_NEAR(opt.gather_state(info.name, "momentum_buffer").f32()[0], 0.15f * s.grad(i).f32()[0], 1e-7);
    } else {
      ASSERT_EQ(kinds.size(), 2u);
      EXPECT_NEAR(opt.gather_state(info.name, "exp_avg").f32()[0], 0.2f * s.grad(i).f32()[0], 1e-7);
    }
  }
  // An AdamW parameter moved by lr * sign(g) at the first step (plus decay).
  const float g0 = s.grad("blocks.0.value.gain").f32()[0];
  const double expect = before[s.info(5).offset] - 0.5 / 40 * (g0 > 0 ? 1 : -1);
  EXPECT_NEAR(s.param("blocks.0.value.gain").f32()[0], expect, 1e-6);
}

// --optimizer adamw: AdamW (adamw.matrix) updates the block matrices too, with AdamW's states,
// and no parameter is Muon's; decay applies per group (0 on the scalar group here).
TEST(Optimizer, AdamWForEveryParameter) {
  ParamStore s = make_store();
  fill(s, 7, false);
  std::vector<float> before(s.param_data(), s.param_data() + s.total_numel());
  OptimizerConfig cfg = OptimizerConfig::defaults(16);
  cfg.adamw_matrices = true;
  for (AdamWHyper* h : {&cfg.adamw.embedding, &cfg.adamw.lm_head, &cfg.adamw.value_table,
                        &cfg.adamw.matrix})
    *h = {1e-3, 0.9, 0.999, 0.1, 1e-8};
  for (AdamWHyper* h : {&cfg.adamw.scalar, &cfg.adamw.gain}) *h = {1e-3, 0.9, 0.999, 0.0, 1e-8};
  cfg.schedule.warmup_steps = 0;
  EXPECT_EQ(cfg.to_json()["optimizer"], "adamw");
  ProcessGrid grid(self_communicator(), GridShape{});
  DistributedOptimizer opt(&s, cfg, grid);
  fill(s, 8, true);
  StepStats st = opt.step(0, 100);
  EXPECT_DOUBLE_EQ(st.matrix_lr, 1e-3);
  for (int i = 0; i < s.size(); ++i) {
    const ParamInfo& info = s.info(i);
    SCOPED_TRACE(info.name);
    ASSERT_EQ(opt.state_kinds(info.name), adamw_state_kinds());
    // First step: p = p (1 - lr wd) - lr g / (|g| + eps) (bias-corrected m / sqrt(v) = sign g).
    const double wd = info.group == ParamGroup::kScalar ? 0.0 : 0.1;
    for (int64_t k = 0; k < info.numel(); k += 7) {
      const double p0 = before[info.offset + k], g = s.grad(i).f32()[k];
      const double want = p0 * (1 - 1e-3 * wd) - 1e-3 * g / (std::fabs(g) + 1e-8);
      ASSERT_NEAR(s.param(i).f32()[k], want, 1e-6) << k;
    }
  }
  // The same store under the default (Muon) optimizer keeps Muon's state for matrices.
  DistributedOptimizer muon(&s, OptimizerConfig::defaults(16), grid);
  EXPECT_EQ(muon.state_kinds("blocks.0.mlp.fc"), muon_state_kinds());
}

TEST(Optimizer, ClippingAndExternalNorm) {
  ParamStore s = make_store();
  fill(s, 7, false);
  OptimizerConfig cfg = OptimizerConfig::defaults(16);
  cfg.max_grad_norm = 1.0;
  ProcessGrid grid(self_communicator(), GridShape{});
  DistributedOptimizer opt(&s, cfg, grid);
  fill(s, 8, true);
  const double norm = grad_norm(s);
  ASSERT_GT(norm, 1.0);
  // The reference: the same store with its gradients scaled in place by the clip factor first
  // (what the optimizer did before the factor moved into the update kernels), stepped unclipped.
  ParamStore ref = make_store();
  fill(ref, 7, false);
  fill(ref, 8, true);
  OptimizerConfig unclipped = cfg;
  unclipped.max_grad_norm = 0.0;
  DistributedOptimizer ref_opt(&ref, unclipped, grid);
  const std::vector<float> grads = s.grads_tensor().to_host_f32();
  StepStats st = opt.step(50, 100);
  EXPECT_DOUBLE_EQ(st.grad_norm, norm);
  EXPECT_NEAR(st.clip_scale, 1.0 / (norm + 1e-6), 1e-15);
  scale_grads(ref, st.clip_scale);
  ref_opt.step(50, 100, grad_norm(ref));
  // The update kernels read each gradient times the factor: the bits of the clipped-in-place
  // step, and the gradients themselves left as they were.
  EXPECT_EQ(s.params_tensor().to_host_f32(), ref.params_tensor().to_host_f32());
  EXPECT_EQ(s.grads_tensor().to_host_f32(), grads);
  EXPECT_NEAR(grad_norm(ref), 1.0, 1e-5);  // the reference's were clipped in place
  // A caller-provided (e.g. all-reduced) norm is used as is.
  fill(s, 9, true);
  StepStats st2 = opt.step(51, 100, 0.5);
  EXPECT_DOUBLE_EQ(st2.grad_norm, 0.5);
  EXPECT_EQ(st2.clip_scale, 1.0);
  opt.set_step_count(40);
  EXPECT_EQ(opt.step_count(), 40);
}

}  // namespace
}  // namespace vt::optim
