// `vtrain plan`'s enumeration and arithmetic (src/plan/plan.h, step_time.h) against hand-computed values for a
// small model: which layouts exist, the bubble factor, the step time and days from the stated
// formula, the all-reduce estimate, the fit threshold, the checkpoint size, and the refusals.
#include "plan/plan.h"
#include "plan/step_time.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <regex>
#include <set>
#include <tuple>

#include "absl/strings/str_format.h"
#include "core/arena.h"
#include "model/flops.h"
#include "model/gpt.h"

namespace vt::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// L4, d128, 4 heads x hd 32 with 2 KV heads, T 256, vocabulary 32768: 32 rows per step.
PlanInput small_input() {
  PlanInput in;
  ModelConfig c = *preset_config("tiny");
  c.n_kv_head = 2;
  EXPECT_TRUE(c.finalize().ok());
  in.cfg = c;
  in.tokens = 1e9;
  in.global_batch = 32 * 256;
  in.gpus = 8;
  in.gpus_per_node = 8;
  in.gpu = *gpu_spec("h100", 0, 0);
  return in;
}

const LayoutPlan& find(const Plan& p, int tp, int pp, int dp, int mb,
                       Recompute r = Recompute::kOff) {
  for (const LayoutPlan& l : p.layouts)
    if (l.layout.tp == tp && l.layout.pp == pp && l.layout.dp == dp &&
        l.layout.micro_batch == mb && l.layout.recompute == r)
      return l;
  ADD_FAILURE() << "no layout tp " << tp << " pp " << pp << " dp " << dp << " mb " << mb;
  return p.layouts.front();
}

TEST(Plan, EnumeratesTheLayoutsByHand) {
  // tp divides 4 heads and 2 KV heads: 1, 2. pp divides 4 layers: 1, 2, 4. dp = 8 / (tp pp):
  // (1,1,8) (1,2,4) (1,4,2) (2,1,4) (2,2,2) (2,4,1). Rows per dp rank 32/dp = 4, 8, 16, 8, 16, 32
  // take 3, 4, 5, 4, 5, 6 power-of-two micro-batches: 27, twice (recompute on/off) = 54.
  PlanInput in = small_input();
  auto ls = enumerate_layouts(in);
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_EQ(ls->size(), 54u);
  std::set<std::tuple<int, int, int>> shapes;
  for (const Layout& l : *ls) {
    shapes.insert({l.tp, l.pp, l.dp});
    EXPECT_EQ(l.tp * l.pp * l.dp, 8);
    EXPECT_EQ((32 / l.dp) % l.micro_batch, 0);
  }
  EXPECT_EQ(shapes, (std::set<std::tuple<int, int, int>>{
                        {1, 1, 8}, {1, 2, 4}, {1, 4, 2}, {2, 1, 4}, {2, 2, 2}, {2, 4, 1}}));
}

TEST(Plan, MinMicroBatchLeavesOutSmallerOnes) {
  // Micro-batches of at least 4: dp 8, 4, 2, 1 keep 1, 2, 3, 4 of theirs; the shapes of
  // EnumeratesTheLayoutsByHand then give 1 + 2 + 3 + 2 + 3 + 4 = 15, x2.
  PlanInput in = small_input();
  in.min_micro_batch = 4;
  auto ls = enumerate_layouts(in);
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_EQ(ls->size(), 30u);
  for (const Layout& l : *ls) EXPECT_GE(l.micro_batch, 4);
}

TEST(Plan, GpusPerNodeBoundsTensorParallel) {
  PlanInput in = small_input();
  in.gpus_per_node = 1;  // 8 nodes of one GPU: tp 1 only: 3 + 4 + 5 = 12 micro-batches, x2
  auto ls = enumerate_layouts(in);
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_EQ(ls->size(), 24u);
  for (const Layout& l : *ls) EXPECT_EQ(l.tp, 1);
  in.recompute = "off";
  EXPECT_EQ(enumerate_layouts(in)->size(), 12u);
}

// The GEMM curve flat, no launch cost, the gradient sum after backward: the step is FLOPs at the
// MFU, tensor-parallel all-reduces, pipeline sends and the whole all-reduce.
PlanInput plain_cost(PlanInput in) {
  in.gemm_curve.tokens = {1};
  in.gemm_curve.efficiency = {1};
  in.launch_us = 0;
  in.overlap_grad_sync = false;
  return in;
}

// --recompute all weighs the selective modes too: attn reruns the attention core's forward (a
// third of the attention FLOPs, no communication) and 3 kernels per layer, mlp one elementwise
// kernel (no FLOPs counted); each keeps less than off and more than block.
TEST(Plan, SelectiveRecomputeCostsItsRerun) {
  PlanInput in = plain_cost(small_input());
  in.recompute = "all";
  in.launch_us = 4;
  auto ls = enumerate_layouts(in);
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_EQ(ls->size(), 108u);  // EnumeratesTheLayoutsByHand's 27, four times
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok()) << p.status();
  const LayoutPlan& off = find(*p, 2, 4, 1, 4);
  const LayoutPlan& attn = find(*p, 2, 4, 1, 4, Recompute::kAttn);
  const LayoutPlan& mlp = find(*p, 2, 4, 1, 4, Recompute::kMlp);
  const LayoutPlan& block = find(*p, 2, 4, 1, 4, Recompute::kBlock);
  const double fpt = flops_per_token(in.cfg), mp = static_cast<double>(matmul_params(in.cfg));
  EXPECT_NEAR(attn.compute_s / off.compute_s, 1 + (fpt - 6 * mp) / (3 * fpt), 1e-12);
  EXPECT_DOUBLE_EQ(mlp.compute_s, off.compute_s);
  // 1 layer per stage x 8 micro-batches x 4 us per launch.
  EXPECT_NEAR(attn.launch_s - off.launch_s, 3 * 1 * 8 * 4e-6, 1e-15);
  EXPECT_NEAR(mlp.launch_s - off.launch_s, 1 * 1 * 8 * 4e-6, 1e-15);
  EXPECT_DOUBLE_EQ(attn.tp_comm_s, off.tp_comm_s);
  EXPECT_DOUBLE_EQ(mlp.tp_comm_s, off.tp_comm_s);
  EXPECT_GT(block.tp_comm_s, off.tp_comm_s);
  for (const LayoutPlan* l : {&attn, &mlp}) {
    EXPECT_LT(l->mem.activations, off.mem.activations);
    EXPECT_GT(l->mem.activations, block.mem.activations);
    EXPECT_GT(l->mem.recompute_transient, 0.0);
  }
  in.recompute = "sometimes";
  const absl::Status bad = enumerate_layouts(in).status();
  EXPECT_NE(bad.message().find("--recompute 'sometimes'"), std::string::npos) << bad;
}

TEST(Plan, BubbleStepTimeAndDaysFollowTheFormula) {
  PlanInput in = plain_cost(small_input());
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok()) << p.status();
  const double fpt = flops_per_token(in.cfg);
  // tp 2, pp 4, dp 1, micro-batch 4: 32 rows / 4 = 8 micro-batches, bubble 1 + 3/8; no
  // data-parallel all-reduce; tensor parallel: 1 layer per stage x 4 all-reduces x 2 (2-1)/2 x
  // 8192 tokens x 128 x 2 bytes (bf16) at 400 GB/s.
  const LayoutPlan& a = find(*p, 2, 4, 1, 4);
  EXPECT_EQ(a.micro_batches, 8);
  EXPECT_DOUBLE_EQ(a.bubble, 1.375);
  EXPECT_DOUBLE_EQ(a.allreduce_s, 0.0);
  const double tp_s = 1 * 4 * 1.0 * 8192 * 128 * 2 / 400e9;
  EXPECT_NEAR(a.tp_comm_s, tp_s, 1e-9 * tp_s);
  const double compute = 8192.0 * fpt / (8 * 989e12 * 0.4);
  // Pipeline sends: per micro-batch the residual stream (4 rows x 256 x 128, bf16) forward and
  // back, in one node (tp x dp = 2 < 8) at 400 GB/s.
  const double send_s = 2.0 * 8 * 4 * 256 * 128 * 2 / 400e9;
  EXPECT_NEAR(a.send_s, send_s, 1e-9 * send_s);
  // The optimizer's collectives over the stage's 2 ranks: Muon's broadcast of the stage's
  // matrices (one layer's, bf16, global shapes) at 400 GB/s; no ZeRO-1 gather at dp 1.
  ParamStore whole;
  GPT(in.cfg).register_params(whole);
  double matrices = 0, others = 0;
  for (const ParamInfo& info : whole.infos())
    (info.group == ParamGroup::kMatrix ? matrices : others) += static_cast<double>(info.numel());
  const double opt_a = 2.0 * matrices / 4 / 400e9;  // 4 layers, 1 per stage
  EXPECT_NEAR(a.optimizer_comm_s, opt_a, 1e-9 * opt_a);
  EXPECT_NEAR(a.step_s, (compute + tp_s + send_s) * 1.375 + opt_a, 1e-12 * compute);
  const double tok_s = 8192.0 / ((compute + tp_s + send_s) * 1.375 + opt_a);
  EXPECT_NEAR(a.tok_per_s, tok_s, 1e-9 * tok_s);
  EXPECT_NEAR(a.days, 1e9 / tok_s / 86400, 1e-9 * a.days);
  EXPECT_NEAR(a.gpu_hours, 1e9 / tok_s / 3600 * 8, 1e-9 * a.gpu_hours);
  // Recomputation costs a third more compute and reruns the forward's two all-reduces.
  const LayoutPlan& ar = find(*p, 2, 4, 1, 4, Recompute::kBlock);
  EXPECT_NEAR(ar.step_s, (compute * 4 / 3 + tp_s * 6 / 4 + send_s) * 1.375 + opt_a,
              1e-12 * compute);

  // tp 1, pp 1, dp 8, micro-batch 2: 4 rows / 2 = 2 micro-batches, bubble 1; the all-reduce moves
  // 2 (8-1)/8 x the fp32 gradients of the whole model at 400 GB/s (8 GPUs in one node).
  const LayoutPlan& b = find(*p, 1, 1, 8, 2);
  EXPECT_EQ(b.micro_batches, 2);
  EXPECT_DOUBLE_EQ(b.bubble, 1.0);
  EXPECT_DOUBLE_EQ(b.tp_comm_s, 0.0);
  ParamStore store;
  GPT model(in.cfg);
  model.register_params(store);
  const double grads = 4.0 * store.total_numel();
  EXPECT_DOUBLE_EQ(b.mem.grads, grads);
  EXPECT_NEAR(b.allreduce_s, 2.0 * 7 / 8 * grads / 400e9, 1e-15);
  // --grad-sync bf16: the started sums' bf16 copies (2 bytes a gradient) count in the total.
  PlanInput wire = in;
  wire.grad_sync_bf16 = true;
  const LayoutPlan bw = plan_layout(wire, Layout{1, 1, 8, 2, Recompute::kOff});
  EXPECT_DOUBLE_EQ(bw.mem.grad_wire, grads / 2);
  EXPECT_DOUBLE_EQ(bw.mem.total(), b.mem.total() + grads / 2);
  EXPECT_DOUBLE_EQ(b.mem.grad_wire, 0.0);
  // Plus Muon's broadcast of every matrix and the ZeRO-1 gather of 7/8 of the AdamW parameters.
  const double opt_b = (2.0 * matrices + 4.0 * 7 / 8 * others) / 400e9;
  EXPECT_NEAR(b.optimizer_comm_s, opt_b, 1e-9 * opt_b);
  EXPECT_NEAR(b.step_s, compute + 2.0 * 7 / 8 * grads / 400e9 + opt_b, 1e-12 * compute);
  // Across nodes (2 GPUs per node: tp 1 x dp 8 spans 4 nodes) at 50 GB/s.
  PlanInput multi = in;
  multi.gpus_per_node = 2;
  const LayoutPlan c = plan_layout(multi, Layout{1, 1, 8, 2, Recompute::kOff});
  EXPECT_NEAR(c.allreduce_s, 2.0 * 7 / 8 * grads / 50e9, 1e-15);
  // Fastest first.
  for (size_t i = 1; i < p->fitting.size(); ++i)
    EXPECT_LE(p->fitting[i - 1].days, p->fitting[i].days);
}

TEST(Plan, GemmCurveLowersSmallMicroBatchesOnly) {
  const GemmCurve c = default_gemm_curve();
  EXPECT_NEAR(c.at(2048), 1.0, 1e-12);
  EXPECT_NEAR(c.at(1 << 20), 1.0, 1e-12);             // flat beyond the last point
  EXPECT_NEAR(c.at(256), 201.34 / 293.65, 1e-12);      // the published points
  EXPECT_NEAR(c.at(768), (c.at(512) + c.at(1024)) / 2, 1e-12);  // linear between them
  EXPECT_NEAR(c.at(128), c.at(256) / 2, 1e-12);        // proportional below the first
  // The tiny model's T = 256: micro-batch 1 is 256 tokens per GEMM, micro-batch 8 is 2048.
  PlanInput in = small_input();
  in.launch_us = 0;
  const LayoutPlan small = plan_layout(in, Layout{1, 1, 8, 1, Recompute::kOff});
  const LayoutPlan large = plan_layout(in, Layout{1, 1, 4, 8, Recompute::kOff});
  EXPECT_NEAR(small.gemm_eff, c.at(256), 1e-12);
  EXPECT_NEAR(large.gemm_eff, 1.0, 1e-12);
  const double fpt = flops_per_token(in.cfg);
  EXPECT_NEAR(small.compute_s, 8192.0 * fpt / (8 * 989e12 * 0.4 * c.at(256)), 1e-15);
}

TEST(Plan, KernelLaunchesCostPerLayerAndMicroBatch) {
  PlanInput in = plain_cost(small_input());
  in.launch_us = 5;
  // tp 1 pp 2 dp 4 micro-batch 2: 8 rows per dp rank -> 4 micro-batches; 2 layers per stage.
  const LayoutPlan l = plan_layout(in, Layout{1, 2, 4, 2, Recompute::kOff});
  EXPECT_NEAR(l.launch_s, 5e-6 * kKernelsPerLayerPass * 2 * 4, 1e-15);
  const LayoutPlan r = plan_layout(in, Layout{1, 2, 4, 2, Recompute::kBlock});
  EXPECT_NEAR(r.launch_s, 5e-6 * kKernelsPerLayerPass * 2 * 4 * 4 / 3, 1e-15);
  const double base = (l.compute_s + l.tp_comm_s + l.send_s) * l.bubble + l.allreduce_exposed_s +
                      l.optimizer_comm_s;
  EXPECT_NEAR(l.step_s, base + l.launch_s * l.bubble, 1e-12);
}

TEST(Plan, BackwardHidesTheLayersGradientSums) {
  // By hand: 1 s of all-reduce, 90% of it the 10 layers' buckets, a 0.5 s window.
  EXPECT_NEAR(exposed_grad_sum_s(1.0, 0.9, 10, 0.5, false), 1.0, 1e-15);
  EXPECT_NEAR(exposed_grad_sum_s(1.0, 0.9, 10, 0.5, true), 0.4 + 0.1, 1e-12);
  // A long backward still leaves the last layer's bucket (and the non-layer rest).
  EXPECT_NEAR(exposed_grad_sum_s(1.0, 0.9, 10, 5.0, true), 0.09 + 0.1, 1e-12);
  // In a layout: dp 8, one micro-batch per step, so the window is the whole step's backward.
  PlanInput in = small_input();
  in.launch_us = 0;
  const LayoutPlan over = plan_layout(in, Layout{1, 1, 8, 4, Recompute::kOff});
  in.overlap_grad_sync = false;
  const LayoutPlan after = plan_layout(in, Layout{1, 1, 8, 4, Recompute::kOff});
  EXPECT_EQ(over.micro_batches, 1);
  EXPECT_NEAR(after.allreduce_exposed_s, after.allreduce_s, 1e-15);
  EXPECT_LT(over.allreduce_exposed_s, after.allreduce_s);
  EXPECT_GT(over.allreduce_exposed_s, 0.0);
  EXPECT_NEAR(after.step_s - over.step_s, after.allreduce_s - over.allreduce_exposed_s, 1e-12);
}

// --grad-sync bf16: the data-parallel all-reduce moves 2 bytes a gradient instead of 4, by hand:
// 2 (8-1)/8 x 2 x the model's parameters at 400 GB/s; the step loses the difference (summed
// after backward, nothing hides it).
TEST(Plan, Bf16GradSyncHalvesTheAllReduce) {
  PlanInput in = plain_cost(small_input());
  const LayoutPlan f32 = plan_layout(in, Layout{1, 1, 8, 2, Recompute::kOff});
  in.grad_sync_bf16 = true;
  const LayoutPlan bf16 = plan_layout(in, Layout{1, 1, 8, 2, Recompute::kOff});
  ParamStore store;
  GPT model(in.cfg);
  model.register_params(store);
  const double wire = 2.0 * store.total_numel();
  EXPECT_NEAR(bf16.allreduce_s, 2.0 * 7 / 8 * wire / 400e9, 1e-15);
  EXPECT_NEAR(f32.allreduce_s, 2 * bf16.allreduce_s, 1e-15);
  EXPECT_NEAR(f32.step_s - bf16.step_s, bf16.allreduce_s, 1e-12);
  EXPECT_DOUBLE_EQ(bf16.mem.grads, f32.mem.grads);  // the arena stays fp32
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(format_plan(in, *p, 3).find("x bf16 (--grad-sync bf16) grads"), std::string::npos);
}

// --zero 2: the gradient sum is a reduce-scatter into the optimizer's owners, (8-1)/8 x the
// wire's bytes of the model's gradients a rank, half the all-reduce's, on either wire. The
// parameters return behind the next step's first forward, by hand: Muon's bf16 broadcasts of the
// matrices and 7/8 of the AdamW parameters (fp32, the output head's weight bf16 under bf16
// activations) at 400 GB/s; the embedding's and shared parameters' gather is exposed, the rest
// up to one micro-batch's forward (a third of its compute) hidden. The memory estimate gains the
// larger of the packed reduce-scatter buffers and the gathers' buffers.
TEST(Plan, Zero2HalvesTheGradientSum) {
  PlanInput in = plain_cost(small_input());
  ParamStore store;
  GPT model(in.cfg);
  model.register_params(store);
  const double grads = 4.0 * store.total_numel();
  double matrices = 0, adam = 0, head = 0, first = 0;
  for (const ParamInfo& info : store.infos()) {
    const double n = static_cast<double>(info.numel());
    (info.group == ParamGroup::kMatrix ? matrices : adam) += n;
    if (info.group == ParamGroup::kLmHead) head += n;
    else if (info.group != ParamGroup::kMatrix && info.layer < 0) first += n;
  }
  ASSERT_GT(head, 0.0);
  ASSERT_GT(first, 0.0);
  const double hb = in.act_dtype == DType::kBF16 ? 2.0 : 4.0;
  const double muon_s = 2.0 * matrices / 400e9;
  const double adam_s = 7.0 / 8 * (4.0 * (adam - head) + hb * head) / 400e9;
  const double first_s = 7.0 / 8 * 4.0 * first / 400e9;
  for (bool bf16 : {false, true}) {
    in.grad_sync_bf16 = bf16;
    in.zero = 1;
    const LayoutPlan z1 = plan_layout(in, Layout{1, 1, 8, 2, Recompute::kOff});
    in.zero = 2;
    const LayoutPlan z2 = plan_layout(in, Layout{1, 1, 8, 2, Recompute::kOff});
    EXPECT_NEAR(z2.allreduce_s, 7.0 / 8 * grads * (bf16 ? 0.5 : 1.0) / 400e9, 1e-15);
    EXPECT_NEAR(z1.allreduce_s, 2 * z2.allreduce_s, 1e-15);
    // Summed after backward here; and the optimizer's return partly hidden.
    EXPECT_NEAR(z1.step_s - z2.step_s,
                z2.allreduce_s + z1.optimizer_comm_s - z2.optimizer_comm_s, 1e-12);
    EXPECT_NEAR(z1.optimizer_comm_s, muon_s + 7.0 / 8 * 4.0 * adam / 400e9, 1e-15);
    EXPECT_DOUBLE_EQ(z1.param_return_s, z1.optimizer_comm_s);
    EXPECT_NEAR(z2.param_return_s, muon_s + adam_s, 1e-15);
    const double forward_s = z2.compute_s / z2.micro_batches / 3;
    EXPECT_NEAR(z2.optimizer_comm_s,
                first_s + std::max(0.0, muon_s + adam_s - first_s - forward_s), 1e-15);
    EXPECT_LT(z2.optimizer_comm_s, z1.optimizer_comm_s);
    // Memory: 4 bytes x 9/8 of the AdamW elements packed for the reduce-scatter; the gathers
    // the same with the head's weight at hb bytes, plus Muon's results; the total counts the
    // larger.
    EXPECT_NEAR(z2.mem.zero_reduce, 4.0 * adam * 9 / 8, 1e-6);
    // plus Muon's whole results in flight (bf16 under bf16 activations: hb bytes).
    EXPECT_NEAR(z2.mem.param_gather, (4.0 * (adam - head) + hb * head) * 9 / 8 + hb * matrices,
                1e-6);
    EXPECT_NEAR(z2.mem.total() - z1.mem.total(),
                std::max(z2.mem.zero_reduce, z2.mem.param_gather), 1e-3);
    EXPECT_EQ(z1.mem.zero_reduce + z1.mem.param_gather, 0.0);
    auto p = make_plan(in);
    ASSERT_TRUE(p.ok()) << p.status();
    const std::string text = format_plan(in, *p, 3);
    EXPECT_NE(text.find("reduce-scatter into the optimizer's owners (--zero 2)"),
              std::string::npos);
    // The winner's reason, in numbers.
    const LayoutPlan& w = p->fitting.front();
    EXPECT_NE(text.find(absl::StrFormat("why: tp %d pp %d dp %d mb %d wins at %.3f s a step",
                                        w.layout.tp, w.layout.pp, w.layout.dp,
                                        w.layout.micro_batch, w.step_s)),
              std::string::npos)
        << text;
  }
}

TEST(Plan, GemmCurveFileIsReadAndCheckedByName) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
  };
  auto ok = read_gemm_curve(write("curve_ok.json", R"({"tokens": [512, 4096], "efficiency": [0.5, 0.9]})"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_NEAR(ok->at(2304), 0.7, 1e-12);
  EXPECT_NEAR(ok->at(8192), 0.9, 1e-12);
  for (const auto& [name, text, why] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"c1.json", R"({"tokens": [512], "efficiency": [0.5, 0.9]})", "same number"},
           {"c2.json", R"({"tokens": [4096, 512], "efficiency": [0.5, 0.9]})", "increasing"},
           {"c3.json", R"({"tokens": [512], "efficiency": [1.5]})", "GEMM efficiency 1.5 is outside [0.001, 1]"},
           // The range --mfu has holds for a file's values too (1e-300 printed 300-digit days).
           {"c6.json", R"({"tokens": [512], "efficiency": [1e-300]})", "GEMM efficiency 1e-300 is outside [0.001, 1]"},
           {"c7.json", R"({"tokens": [512], "efficiency": [0.0009]})", "outside [0.001, 1]"},
           {"c8.json", R"({"tokens": [1e300], "efficiency": [0.5]})", "tokens per GEMM 1e+300 is outside [1, 1e+09]"},
           {"c9.json", R"({"tokens": [0.5], "efficiency": [0.5]})", "tokens per GEMM 0.5 is outside"},
           {"c4.json", R"({"tokens": ["a"], "efficiency": [0.5]})", "not a number"},
           {"c5.json", "[1, 2]", "expected a JSON object"}}) {
    auto st = read_gemm_curve(write(name, text));
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_NE(std::string(st.status().message()).find(why), std::string::npos) << st.status();
    EXPECT_NE(std::string(st.status().message()).find(name), std::string::npos) << st.status();
  }
  EXPECT_FALSE(read_gemm_curve(dir + "/missing_curve.json").ok());
  // What is not a regular file is refused by name before a byte is read (a directory threw
  // std::ios_base::failure, /dev/zero read until bad_alloc).
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {dir, "is a directory"}, {"/dev/zero", "is a character device"}}) {
    auto st = read_gemm_curve(path);
    ASSERT_FALSE(st.ok()) << path;
    EXPECT_NE(std::string(st.status().message()).find("--gemm-curve " + path + ": " + why),
              std::string::npos) << st.status();
  }
  // Efficiency below the first point falls with the tokens, never under the range's floor.
  EXPECT_NEAR(ok->at(1), kGemmEfficiencyRange.lo, 1e-15);
  EXPECT_GE(ok->at(0), kGemmEfficiencyRange.lo);
}

TEST(Plan, MemoryIsTheLargestStagePlusTheAllowance) {
  PlanInput in = small_input();
  const Layout l{1, 2, 4, 8, Recompute::kOff};
  const std::vector<MemoryEstimate> st = stage_memory(in, l);
  ASSERT_EQ(st.size(), 2u);
  const LayoutPlan p = plan_layout(in, l);
  const double largest = std::max(st[0].total(), st[1].total());
  EXPECT_DOUBLE_EQ(p.mem.total(), largest);
  EXPECT_DOUBLE_EQ(p.per_gpu(), largest + 2 * kGiB);
  // The fit threshold: (1 - headroom) x memory, exactly at the need and just below it.
  in.gpu = *gpu_spec("custom", p.per_gpu() / kGiB / 0.9, 100);
  EXPECT_TRUE(plan_layout(in, l).fits);
  in.gpu = *gpu_spec("custom", p.per_gpu() / kGiB / 0.9 * 0.999, 100);
  EXPECT_FALSE(plan_layout(in, l).fits);
}

TEST(Plan, CheckpointHoldsParametersAndOptimizerStatesInFp32) {
  PlanInput in = small_input();
  const Plan p = model_totals(in);
  ParamStore store;
  GPT model(in.cfg);
  model.register_params(store);
  double matrix = 0, other = 0;
  for (const ParamInfo& i : store.infos())
    (i.group == ParamGroup::kMatrix ? matrix : other) += i.numel();
  EXPECT_DOUBLE_EQ(p.params, matrix + other);
  // Muon: weight + momentum; AdamW: weight + two moments; 4 bytes each.
  EXPECT_DOUBLE_EQ(p.ckpt_bytes, 4 * (2 * matrix + 3 * other));
  EXPECT_DOUBLE_EQ(p.ckpt_save_s, p.ckpt_bytes / 2e9);
}

TEST(Plan, RefusesBadInputByName) {
  PlanInput in = small_input();
  in.global_batch = 1000;  // not whole rows of 256
  auto r = enumerate_layouts(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--global-batch 1000"), std::string::npos) << r.status();
  in = small_input();
  in.gpus = 12;  // not whole nodes of 8
  r = enumerate_layouts(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--gpus 12 is not a whole number of nodes"),
            std::string::npos)
      << r.status();
  in = small_input();
  in.gpus = 3;  // pp 1 (3 divides no 4 layers), dp 3 does not divide 32 rows
  r = enumerate_layouts(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no layout of 3 GPUs"), std::string::npos) << r.status();
  EXPECT_FALSE(gpu_spec("custom", 0, 100).ok());
  EXPECT_FALSE(gpu_spec("tpu", 0, 0).ok());
}

// Nothing fits: the message gives the smallest need and a GPU count that fits, which really
// fits while half of it does not.
TEST(Plan, NothingFitsSaysTheSmallestNeedAndWhatWouldFit) {
  PlanInput in = small_input();
  in.gpus = 1;
  in.workspace_gib = 0;
  // Find the smallest need of one GPU, then offer a GPU with a little less.
  in.gpu = GpuSpec{"custom", 1e6, 100};
  auto big = make_plan(in);
  ASSERT_TRUE(big.ok());
  double least = 1e300;
  for (const LayoutPlan& l : big->layouts) least = std::min(least, l.per_gpu());
  in.gpu = GpuSpec{"custom", least / kGiB / 0.9 * 0.99, 100};
  auto p = make_plan(in);
  ASSERT_FALSE(p.ok());
  const std::string msg(p.status().message());
  EXPECT_NE(msg.find("no layout of 1 custom GPUs fits"), std::string::npos) << msg;
  char need[32];
  std::snprintf(need, sizeof need, "smallest need is %.1f GiB", least / kGiB);
  EXPECT_NE(msg.find(need), std::string::npos) << msg;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(msg, m, std::regex("--gpus (\\d+) would fit"))) << msg;
  const int fit = std::stoi(m[1]);
  in.gpus = fit;
  EXPECT_TRUE(make_plan(in).ok()) << fit;
  in.gpus = fit / 2;
  EXPECT_FALSE(make_plan(in).ok()) << fit / 2;
}

TEST(Plan, InterleavedBubbleWhereTheLayoutAllowsIt) {
  // --vpp 2 on 4 layers: pp 2 (2 layers per stage) interleaves when its micro-batches are a
  // multiple of 2; pp 4 (one layer per stage) cannot and keeps plain 1F1B.
  PlanInput in = small_input();
  in.vpp = 2;
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok()) << p.status();
  // tp 1, pp 2, dp 4, micro-batch 2: 8 rows per dp rank / 2 = 4 micro-batches: 1 + 1/(2 x 4).
  const LayoutPlan& a = find(*p, 1, 2, 4, 2);
  EXPECT_EQ(a.layout.vpp, 2);
  EXPECT_EQ(a.micro_batches, 4);
  EXPECT_DOUBLE_EQ(a.bubble, 1.125);
  // micro-batch 8: one micro-batch, not a multiple of pp: plain, bubble 1 + 1/1.
  const LayoutPlan& b = find(*p, 1, 2, 4, 8);
  EXPECT_EQ(b.layout.vpp, 1);
  EXPECT_DOUBLE_EQ(b.bubble, 2.0);
  const LayoutPlan& c = find(*p, 2, 4, 1, 4);
  EXPECT_EQ(c.layout.vpp, 1);
  EXPECT_DOUBLE_EQ(c.bubble, 1.375);
  // The interleaved layout keeps more (smaller) passes in flight: stage 0 of pp 2 holds
  // (2-0-1) 2 + (2-1) 2 + 1 = 5 chunk passes = 2.5 stage passes against plain 1F1B's 2.
  Layout l{1, 2, 4, 2, Recompute::kOff};
  const double plain = stage_memory(in, l)[0].activations;
  l.vpp = 2;
  EXPECT_NEAR(stage_memory(in, l)[0].activations / plain, 2.5 / 2.0, 1e-12);
}

// What `vtrain train` suggests when a layout does not fit: layouts that fit the memory per GPU,
// the refused layout's tp and pp with the largest micro-batch that fits first.
TEST(Plan, SuggestedLayoutsFitNearestFirst) {
  PlanInput in = small_input();
  in.workspace_gib = 0;
  in.headroom = 0;
  // Exactly the need of tp 1 pp 1 dp 8 micro-batch 2: micro-batch 4 (more activations) is over.
  const Layout refused{1, 1, 8, 4, Recompute::kOff};
  const double cap = plan_layout(in, Layout{1, 1, 8, 2, Recompute::kOff}).per_gpu();
  in.gpu = GpuSpec{"custom", cap / kGiB, 100};
  ASSERT_FALSE(plan_layout(in, refused).fits);
  const std::vector<LayoutPlan> s = suggest_layouts(in, refused, 3);
  ASSERT_FALSE(s.empty());
  EXPECT_LE(s.size(), 3u);
  EXPECT_EQ(s[0].layout.tp, 1);
  EXPECT_EQ(s[0].layout.pp, 1);
  EXPECT_EQ(s[0].layout.micro_batch, 2);
  EXPECT_EQ(s[0].layout.recompute, Recompute::kOff);
  std::set<std::tuple<int, int, int, int, Recompute>> seen;
  for (const LayoutPlan& l : s) {
    EXPECT_TRUE(l.fits);
    EXPECT_LE(l.per_gpu(), cap);
    EXPECT_TRUE(seen.insert({l.layout.tp, l.layout.pp, l.layout.dp, l.layout.micro_batch,
                             l.layout.recompute})
                    .second);
  }
  // The planner's best layout (fewest days) is among them.
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok()) << p.status();
  const Layout& best = p->fitting.front().layout;
  bool has_best = false;
  for (const LayoutPlan& l : s)
    has_best |= l.layout.tp == best.tp && l.layout.pp == best.pp && l.layout.dp == best.dp &&
                l.layout.micro_batch == best.micro_batch && l.layout.recompute == best.recompute;
  EXPECT_TRUE(has_best);
  // Memory for nothing: no suggestion.
  in.gpu = GpuSpec{"custom", 1e-6, 100};
  EXPECT_TRUE(suggest_layouts(in, refused, 3).empty());
}

TEST(Plan, CheckLayoutNamesWhatToChange) {
  PlanInput in = small_input();  // 4 heads, 2 KV heads, 4 layers, 32 rows of 256
  EXPECT_TRUE(check_layout(in, Layout{2, 2, 2, 16, Recompute::kOff}).ok());
  auto msg = [&](const Layout& l) { return std::string(check_layout(in, l).message()); };
  EXPECT_NE(msg(Layout{4, 1, 2, 1, Recompute::kOff}).find("tp 4 must divide --heads 4 and --kv-heads 2"),
            std::string::npos);
  EXPECT_NE(msg(Layout{1, 3, 1, 1, Recompute::kOff}).find("pp 3 must divide --layers 4"), std::string::npos);
  EXPECT_NE(msg(Layout{1, 1, 8, 3, Recompute::kOff}).find("24 rows does not divide the 32 rows"),
            std::string::npos);
  in.gpus_per_node = 1;
  EXPECT_NE(msg(Layout{2, 1, 1, 1, Recompute::kOff}).find("more than --gpus-per-node 1"), std::string::npos);
  // Any micro-batch dividing the rows, not only the powers of two the enumeration tries.
  in = small_input();
  in.global_batch = 24 * 256;
  EXPECT_TRUE(check_layout(in, Layout{1, 1, 1, 3, Recompute::kOff}).ok());
}

}  // namespace
}  // namespace vt::plan
