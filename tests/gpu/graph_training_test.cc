// Training micro-steps replayed from a CUDA graph (GPT::forward_backward_on_device inside a
// CudaStepGraph) against the same micro-steps run eagerly: the per-token losses of every
// micro-step, the gradients and the parameters after several optimizer steps equal bit for bit,
// for the value modes and activation dtypes of the GPU training tests (training_step_test.cc).
// The first step runs eagerly (the warm-up that grows the runtime's scratch), later ones replay;
// a change of the micro-batch's shape re-captures and still equals eager. A value mode whose
// micro-step reads the device on the host is refused by the graph's name. With the optimizer step
// captured too (--cuda-graphs step), the gradient norms, clip factors, parameters and every
// optimizer state equal the eager run's over steps whose lr, momentum and weight decay change
// every step and whose clip triggers; a step with a non-finite gradient leaves the weights and
// states untouched on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../support/step_runner.h"
#include "../unit/model_test_util.h"
#include "core/backend.h"
#include "core/cuda_graph.h"
#include "core/cuda_runtime.h"
#include "core/ops.h"
#include "gpu_test_util.h"
#include "train/graph_optimizer_step.h"

namespace vt {
namespace {

class GpuGraphTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    VT_SKIP_WITHOUT_CUDA();
    set_device_backend(make_cuda_backend());
  }
  void TearDown() override { set_device_backend(nullptr); }
};

// What a run captures: kNone runs everything eagerly; kMicroSteps replays the micro-steps from
// one CudaStepGraph (the optimizer eager, norm read on the host); kStep replays the optimizer step
// too (GraphOptimizerStep: begin_step, the device guard and updates, finish_step).
enum class Graphs { kNone, kMicroSteps, kStep };

struct Trace {
  std::vector<std::vector<float>> token_losses;  // every micro-step's, in order
  std::vector<float> grads_after_first_graph_step;
  std::vector<float> final_params;
  std::vector<std::vector<float>> final_states;  // every parameter's optimizer states, in order
  std::vector<double> grad_norms, clip_scales, lr_multipliers;  // per step
  std::string refusal;  // the graph's error when it refused (the run then stops)
  int captures = 0;
  int64_t replays = 0;
  int opt_captures = 0;
  int64_t opt_replays = 0;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

optim::OptimizerConfig plain_config(const ModelConfig& cfg) {
  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.schedule.warmup_steps = 0;
  return oc;
}

// A config whose every per-step value changes every step of a 5-step run: lr warmup over 3 steps
// then a warmdown over the last 3 (multipliers 1/3, 2/3, 1, 0.683, 0.367), Muon's momentum warmup,
// nanochat's cosine weight decay, and a clip at `max_norm`.
optim::OptimizerConfig moving_config(const ModelConfig& cfg, double max_norm) {
  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.schedule.warmup_steps = 3;
  oc.schedule.warmdown_frac = 0.6;
  oc.schedule.momentum_steps = 4;
  oc.muon.weight_decay = 0.2;
  oc.muon.wd_style = optim::MuonWdStyle::kNanochat;
  oc.adamw.embedding.weight_decay = 0.05;
  oc.max_grad_norm = max_norm;
  return oc;
}

// `steps` optimizer steps of M micro-batches each; micro-batch rows B_of(step). With graphs,
// step 0 runs eagerly and the micro-steps of later steps go through one CudaStepGraph.
template <class RowsOf>
Trace train(const ModelConfig& cfg, DType act, int steps, int M, RowsOf B_of, Graphs graphs,
            const optim::OptimizerConfig& oc) {
  Trace t;
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize(Device::kCUDA, act);
  model.init_params(1234);
  ProcessGrid grid(self_communicator(), GridShape{});
  optim::DistributedOptimizer opt(&store, oc, grid);
  CudaStepGraph graph("micro-step", *backend(Device::kCUDA).cuda());
  GraphOptimizerStep opt_graph(opt);
  std::vector<int32_t> in, tg;
  // The device buffers a graph binds: one set per micro-batch shape, kept for the whole run.
  struct Buffers {
    Tensor ids, targets, loss, step_losses;
  };
  std::vector<std::pair<int, Buffers>> by_rows;
  for (int step = 0; step < steps; ++step) {
    const int B = B_of(step);
    const int64_t N = int64_t(B) * cfg.seq_len;
    Buffers* buf = nullptr;
    for (auto& [rows, b] : by_rows)
      if (rows == B) buf = &b;
    if (!buf) {
      by_rows.push_back({B, Buffers{Tensor::zeros({N}, DType::kI32, Device::kCUDA),
                                    Tensor::zeros({N}, DType::kI32, Device::kCUDA),
                                    Tensor::zeros({N}, DType::kF32, Device::kCUDA),
                                    Tensor::zeros({M * N}, DType::kF32, Device::kCUDA)}});
      buf = &by_rows.back().second;
    }
    const float grad_scale = 1.0f / float(N * M);
    store.zero_grads();
    for (int micro = 0; micro < M; ++micro) {
      testing::pattern_batch(cfg, B, step * M + micro, in, tg);
      buf->ids.copy_from(Tensor::from_host(in.data(), {N}, Device::kCPU));
      buf->targets.copy_from(Tensor::from_host(tg.data(), {N}, Device::kCPU));
      auto body = [&] {
        model.forward_backward_on_device(buf->ids, buf->targets, B, grad_scale, buf->loss);
      };
      if (graphs == Graphs::kNone || step == 0) {
        body();
      } else {
        const GraphKey key{"B=" + std::to_string(B),
                           {buf->ids.raw(), buf->targets.raw(), buf->loss.raw(),
                            store.params_tensor().raw(), store.grads_tensor().raw()}};
        const absl::Status st = graph.run(key, body);
        if (!st.ok()) {
          t.refusal = std::string(st.message());
          return t;
        }
      }
      buf->step_losses.flat(micro * N, N).copy_from(buf->loss);
      t.token_losses.push_back(buf->loss.to_host_f32());
    }
    if (step == 1) t.grads_after_first_graph_step = store.grads_tensor().to_host_f32();
    optim::StepStats st;
    if (graphs == Graphs::kStep) {
      st = opt.begin_step(step, steps);
      const absl::Status run = opt_graph.run(buf->step_losses);
      if (!run.ok()) {
        t.refusal = std::string(run.message());
        return t;
      }
      bool applied = false;
      st = opt.finish_step(st, &applied);
      EXPECT_TRUE(applied) << "step " << step;
    } else {
      st = opt.step(step, steps);
    }
    t.grad_norms.push_back(st.grad_norm);
    t.clip_scales.push_back(st.clip_scale);
    t.lr_multipliers.push_back(st.lr_multiplier);
  }
  t.final_params = store.params_tensor().to_host_f32();
  for (int i = 0; i < store.size(); ++i)
    for (const std::string& kind : opt.state_kinds(store.info(i).name))
      t.final_states.push_back(opt.gather_state(store.info(i).name, kind).to_host_f32());
  t.captures = graph.captures();
  t.replays = graph.replays();
  t.opt_captures = opt_graph.captures();
  t.opt_replays = opt_graph.replays();
  return t;
}

template <class RowsOf>
Trace train(const ModelConfig& cfg, DType act, int steps, int M, RowsOf B_of, bool graphs) {
  return train(cfg, act, steps, M, B_of, graphs ? Graphs::kMicroSteps : Graphs::kNone,
               plain_config(cfg));
}

void expect_equal_runs(const Trace& eager, const Trace& graphed, const std::string& what) {
  ASSERT_TRUE(graphed.refusal.empty()) << what << ": " << graphed.refusal;
  ASSERT_EQ(eager.token_losses.size(), graphed.token_losses.size()) << what;
  for (size_t i = 0; i < eager.token_losses.size(); ++i)
    EXPECT_TRUE(same_bits(eager.token_losses[i], graphed.token_losses[i]))
        << what << ": token losses of micro-step " << i;
  EXPECT_TRUE(same_bits(eager.grads_after_first_graph_step, graphed.grads_after_first_graph_step))
      << what << ": gradients of the first replayed step";
  EXPECT_TRUE(same_bits(eager.final_params, graphed.final_params)) << what << ": parameters";
  EXPECT_TRUE(same_bits(eager.grad_norms, graphed.grad_norms)) << what << ": gradient norms";
  EXPECT_TRUE(same_bits(eager.clip_scales, graphed.clip_scales)) << what << ": clip factors";
  ASSERT_EQ(eager.final_states.size(), graphed.final_states.size()) << what;
  for (size_t i = 0; i < eager.final_states.size(); ++i)
    EXPECT_TRUE(same_bits(eager.final_states[i], graphed.final_states[i]))
        << what << ": optimizer state " << i;
}

TEST_F(GpuGraphTraining, ReplayedMicroStepsEqualEagerBitForBit) {
  for (DType act : {DType::kF32, DType::kBF16})
    for (ValueMode mode : {ValueMode::kBaseline, ValueMode::kBov, ValueMode::kValueEmbed,
                           ValueMode::kResformerDense}) {
      const ModelConfig cfg = testing::tiny_config(mode);
      const std::string what = std::string(value_mode_name(mode)) + " " + dtype_name(act);
      auto rows = [](int) { return 2; };
      const Trace eager = train(cfg, act, 4, 2, rows, false);
      const Trace graphed = train(cfg, act, 4, 2, rows, true);
      expect_equal_runs(eager, graphed, what);
      EXPECT_EQ(graphed.captures, 1) << what;
      EXPECT_EQ(graphed.replays, 5) << what << ": 3 graph steps x 2 micro-steps, 1 capture";
      EXPECT_FALSE(same_bits(eager.token_losses[2], eager.token_losses[4]))
          << what << ": the micro-steps must differ for the comparison to mean anything";
    }
}

TEST_F(GpuGraphTraining, AnotherMicroBatchShapeIsRecapturedAndStillEqualsEager) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);
  auto rows = [](int step) { return step == 2 ? 1 : 2; };  // 2, 2, 1, 2 rows
  const Trace eager = train(cfg, DType::kBF16, 4, 2, rows, false);
  const Trace graphed = train(cfg, DType::kBF16, 4, 2, rows, true);
  expect_equal_runs(eager, graphed, "rows 2, 2, 1, 2");
  EXPECT_EQ(graphed.captures, 3) << "B=2, then B=1, then B=2 again: every change re-captures";
  EXPECT_EQ(graphed.replays, 3);
}

// resformer-plus forms its softmax over learned logits on the host (docs/design.md, "Host
// synchronizations inside a device step"): its micro-step cannot be captured, and says so.
TEST_F(GpuGraphTraining, AMicroStepThatReadsTheDeviceIsRefusedByName) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kResformerPlus);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)train(cfg, DType::kF32, 2, 1, [](int) { return 2; }, true),
               "while capturing the CUDA graph 'micro-step'");
}

// --cuda-graphs step: micro-steps and the optimizer step replayed, against the eager run, for
// the value modes and dtypes above with Muon and AdamW groups (and AdamW for the matrices too).
TEST_F(GpuGraphTraining, ReplayedOptimizerStepsEqualEagerBitForBit) {
  constexpr int kSteps = 5;
  auto rows = [](int) { return 2; };
  for (DType act : {DType::kF32, DType::kBF16})
    for (ValueMode mode : {ValueMode::kBaseline, ValueMode::kBov, ValueMode::kValueEmbed,
                           ValueMode::kResformerDense}) {
      const ModelConfig cfg = testing::tiny_config(mode);
      const std::string what = std::string(value_mode_name(mode)) + " " + dtype_name(act);
      // The clip: below the eager run's first norms, so it triggers.
      const Trace probe = train(cfg, act, 1, 2, rows, Graphs::kNone, moving_config(cfg, 0.0));
      const double clip = probe.grad_norms[0] * 0.6;
      const optim::OptimizerConfig oc = moving_config(cfg, clip);
      const Trace eager = train(cfg, act, kSteps, 2, rows, Graphs::kNone, oc);
      const Trace graphed = train(cfg, act, kSteps, 2, rows, Graphs::kStep, oc);
      expect_equal_runs(eager, graphed, what);
      EXPECT_EQ(graphed.opt_captures, 1) << what;
      EXPECT_EQ(graphed.opt_replays, kSteps - 2) << what << ": step 1 eager, step 2 captures";
      int clipped = 0;
      for (double c : eager.clip_scales) clipped += c < 1.0;
      EXPECT_GE(clipped, 1) << what << ": the clip must trigger";
      for (int i = 1; i < kSteps; ++i)
        EXPECT_NE(eager.lr_multipliers[i], eager.lr_multipliers[i - 1]) << what << " step " << i;
    }
  // AdamW on every parameter (--optimizer adamw).
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);
  optim::OptimizerConfig oc = moving_config(cfg, 0.0);
  oc.adamw_matrices = true;
  oc.adamw.matrix = {0.01, 0.9, 0.95, 0.1};
  const Trace eager = train(cfg, DType::kBF16, kSteps, 2, rows, Graphs::kNone, oc);
  const Trace graphed = train(cfg, DType::kBF16, kSteps, 2, rows, Graphs::kStep, oc);
  expect_equal_runs(eager, graphed, "--optimizer adamw");
  EXPECT_EQ(graphed.opt_captures, 1);
}

TEST_F(GpuGraphTraining, AnotherShapeRecapturesTheOptimizerStepToo) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);
  auto rows = [](int step) { return step == 2 ? 1 : 2; };  // 2, 2, 1, 2 rows
  const optim::OptimizerConfig oc = moving_config(cfg, 0.0);
  const Trace eager = train(cfg, DType::kBF16, 4, 2, rows, Graphs::kNone, oc);
  const Trace graphed = train(cfg, DType::kBF16, 4, 2, rows, Graphs::kStep, oc);
  expect_equal_runs(eager, graphed, "rows 2, 2, 1, 2");
  EXPECT_EQ(graphed.opt_captures, 3) << "the losses' buffer and size are the graph's key";
  EXPECT_EQ(graphed.opt_replays, 0);
}

// A non-finite gradient reaches a replayed optimizer step: the guard formed on the device
// skips every update (parameters, compute copy and states as they were), and finish_step reports
// the norm and that nothing was applied.
TEST_F(GpuGraphTraining, AReplayedStepWithANonFiniteGradientChangesNothing) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize(Device::kCUDA, DType::kBF16);
  model.init_params(7);
  ProcessGrid grid(self_communicator(), GridShape{});
  optim::DistributedOptimizer opt(&store, moving_config(cfg, 1.0), grid);
  GraphOptimizerStep opt_graph(opt);
  const int B = 2;
  const int64_t N = int64_t(B) * cfg.seq_len;
  const Tensor ids = Tensor::zeros({N}, DType::kI32, Device::kCUDA);
  const Tensor targets = Tensor::zeros({N}, DType::kI32, Device::kCUDA);
  const Tensor loss = Tensor::zeros({N}, DType::kF32, Device::kCUDA);
  std::vector<int32_t> in, tg;
  auto states = [&] {
    std::vector<float> all;
    for (int i = 0; i < store.size(); ++i)
      for (const std::string& kind : opt.state_kinds(store.info(i).name)) {
        const std::vector<float> s = opt.gather_state(store.info(i).name, kind).to_host_f32();
        all.insert(all.end(), s.begin(), s.end());
      }
    return all;
  };
  for (int step = 0; step < 4; ++step) {
    testing::pattern_batch(cfg, B, step, in, tg);
    ids.copy_from(Tensor::from_host(in.data(), {N}, Device::kCPU));
    targets.copy_from(Tensor::from_host(tg.data(), {N}, Device::kCPU));
    store.zero_grads();
    model.forward_backward_on_device(ids, targets, B, 1.0f / float(N), loss);
    const bool poison = step == 3;  // the graph is captured at step 1, replayed from step 2
    if (poison) ops::add_scalar(store.grad(0), 0, std::nanf(""));
    const std::vector<float> params = store.params_tensor().to_host_f32();
    const std::vector<float> before = states();
    optim::StepStats st = opt.begin_step(step, 4);
    ASSERT_TRUE(opt_graph.run(loss).ok());
    bool applied = true;
    st = opt.finish_step(st, &applied);
    EXPECT_EQ(applied, !poison) << "step " << step;
    EXPECT_EQ(std::isfinite(st.grad_norm), !poison) << "step " << step;
    EXPECT_EQ(same_bits(store.params_tensor().to_host_f32(), params), poison) << "step " << step;
    EXPECT_EQ(same_bits(states(), before), poison) << "step " << step;
  }
  EXPECT_EQ(opt_graph.replays(), 2);
}

}  // namespace
}  // namespace vt
