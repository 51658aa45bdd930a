// Training micro-steps replayed from a CUDA graph (GPT::forward_backward_on_device inside a
// CudaStepGraph) against the same micro-steps run eagerly: the per-token losses of every
// micro-step, the gradients and the parameters after several optimizer steps equal bit for bit,
// for the value modes and activation dtypes of the GPU training tests (training_step_test.cc).
// The first step runs eagerly (the warm-up that grows the runtime's scratch), later ones replay;
// a change of the micro-batch's shape re-captures and still equals eager. A value mode whose
// micro-step reads the device on the host is refused by the graph's name. The optimizer step
// runs eagerly in both runs (it is not captured yet).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../support/step_runner.h"
#include "../unit/model_test_util.h"
#include "core/backend.h"
#include "core/cuda_graph.h"
#include "core/cuda_runtime.h"
#include "gpu_test_util.h"

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

struct Trace {
  std::vector<std::vector<float>> token_losses;  // every micro-step's, in order
  std::vector<float> grads_after_first_graph_step;
  std::vector<float> final_params;
  std::string refusal;  // the graph's error when it refused (the run then stops)
  int captures = 0;
  int64_t replays = 0;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `steps` optimizer steps of M micro-batches each; micro-batch rows B_of(step). With graphs,
// step 0 runs eagerly and the micro-steps of later steps go through one CudaStepGraph.
template <class RowsOf>
Trace train(const ModelConfig& cfg, DType act, int steps, int M, RowsOf B_of, bool graphs) {
  Trace t;
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize(Device::kCUDA, act);
  model.init_params(1234);
  ProcessGrid grid(self_communicator(), GridShape{});
  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.schedule.warmup_steps = 0;
  optim::DistributedOptimizer opt(&store, oc, grid);
  CudaStepGraph graph("micro-step", *backend(Device::kCUDA).cuda());
  std::vector<int32_t> in, tg;
  // The device buffers a graph binds: one set per micro-batch shape, kept for the whole run.
  struct Buffers {
    Tensor ids, targets, loss;
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
                                    Tensor::zeros({N}, DType::kF32, Device::kCUDA)}});
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
      if (!graphs || step == 0) {
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
      t.token_losses.push_back(buf->loss.to_host_f32());
    }
    if (step == 1) t.grads_after_first_graph_step = store.grads_tensor().to_host_f32();
    opt.step(step, steps);
  }
  t.final_params = store.params_tensor().to_host_f32();
  t.captures = graph.captures();
  t.replays = graph.replays();
  return t;
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

}  // namespace
}  // namespace vt
