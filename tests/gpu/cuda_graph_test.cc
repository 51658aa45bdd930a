// CudaStepGraph (src/core/cuda_graph.h) on the CUDA backend: a dense micro-step (matmul, relu^2,
// matmul, fused cross-entropy loss and gradient, and the backward GEMMs accumulating weight
// gradients) replayed from a graph equals the same calls run eagerly bit for bit, in f32 and
// bf16 activations, over several calls with new inputs; a changed shape or buffer re-captures
// (and the result is again the eager one) or, for a graph limited to one capture, is refused
// by name without running anything; a step that reads a result on the host or synchronizes the
// stream is refused by name (an error status, or an abort that names the graph) and the stream
// works eagerly afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda_graph.h"
#include "core/cuda_runtime.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "gpu_test_util.h"

namespace vt {
namespace {

constexpr int64_t C = 32, H = 64, V = 48;

class GpuGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    VT_SKIP_WITHOUT_CUDA();
    set_device_backend(make_cuda_backend());
  }
  void TearDown() override { set_device_backend(nullptr); }
  CudaRuntime& rt() { return *backend(Device::kCUDA).cuda(); }
};

Tensor device_randn(Shape shape, DType dt, uint64_t seed, float sd) {
  const std::vector<float> h = gputest::randn(size_t(shape_numel(shape)), seed, sd);
  return Tensor::from_host(h.data(), shape, Device::kCUDA).to(Device::kCUDA, dt);
}

// The tensors of a two-layer MLP with a cross-entropy head: inputs and weights in the
// activation dtype, gradients and the per-token loss f32. All outlive the calls (a graph's key).
struct Net {
  int64_t N;
  DType dt;
  Tensor x, w1, w2, targets, dw1, dw2, loss;
  Net(int64_t n, DType d) : N(n), dt(d) {
    x = Tensor::zeros({N, C}, dt, Device::kCUDA);
    w1 = device_randn({C, H}, dt, 11, 0.2f);
    w2 = device_randn({H, V}, dt, 12, 0.2f);
    std::vector<int32_t> t(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) t[size_t(i)] = int32_t((i * 7 + 3) % V);
    targets = Tensor::from_host(t.data(), {N}, Device::kCUDA);
    dw1 = Tensor::zeros({C, H}, DType::kF32, Device::kCUDA);
    dw2 = Tensor::zeros({H, V}, DType::kF32, Device::kCUDA);
    loss = Tensor::zeros({N}, DType::kF32, Device::kCUDA);
  }
  void set_input(uint64_t seed) {
    const std::vector<float> h = gputest::randn(size_t(N * C), seed, 1.0f);
    x.copy_from(Tensor::from_host(h.data(), {N, C}, Device::kCUDA).to(Device::kCUDA, dt));
  }
  void zero_grads() {
    dw1.zero_();
    dw2.zero_();
  }
  // Forward and backward of one micro-batch; temporaries are allocated and freed inside.
  void micro_step() const {
    Tensor h = Tensor::empty({N, H}, dt, Device::kCUDA);
    ops::matmul(x, w1, h);
    Tensor a = Tensor::empty({N, H}, dt, Device::kCUDA);
    ops::relu2(h, a);
    Tensor logits = Tensor::empty({N, V}, dt, Device::kCUDA);
    ops::matmul(a, w2, logits);
    XentArgs xa;
    xa.logits = logits;
    xa.n_valid = V;
    xa.targets = targets;
    xa.cap = 15.0f;
    Tensor lse = Tensor::empty({N}, DType::kF32, Device::kCUDA);
    ops::xent_loss_grad(xa, 1.0f / float(N), lse, loss, logits);  // dlogits in place
    ops::matmul_dw(a, logits, dw2);
    Tensor da = Tensor::empty({N, H}, dt, Device::kCUDA);
    ops::matmul_dx(logits, w2, da, false);
    Tensor dh = Tensor::empty({N, H}, dt, Device::kCUDA);
    ops::relu2_backward(h, da, dh, false);
    ops::matmul_dw(x, dh, dw1);
  }
  GraphKey key() const {
    return GraphKey{"mlp N=" + std::to_string(N) + " dtype=" + std::to_string(int(dt)),
                    {x.raw(), w1.raw(), w2.raw(), targets.raw(), dw1.raw(), dw2.raw(),
                     loss.raw()}};
  }
  // Everything the step wrote, as raw bits (f32 tensors).
  std::vector<float> outputs() const {
    std::vector<float> r = loss.to_host_f32();
    for (const Tensor* t : {&dw1, &dw2}) {
      const std::vector<float> v = t->to_host_f32();
      r.insert(r.end(), v.begin(), v.end());
    }
    return r;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Three calls with new inputs; gradients accumulate over the calls as over micro-batches.
std::vector<std::vector<float>> eager_run(Net& net) {
  net.zero_grads();
  std::vector<std::vector<float>> out;
  for (uint64_t call = 0; call < 3; ++call) {
    net.set_input(100 + call);
    net.micro_step();
    out.push_back(net.outputs());
  }
  return out;
}

TEST_F(GpuGraph, ReplayEqualsEagerBitForBit) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Net net(16, dt);
    const std::vector<std::vector<float>> eager = eager_run(net);
    ASSERT_FALSE(same_bits(eager[0], eager[1])) << "the calls must differ to compare anything";
    CudaStepGraph graph("mlp micro-step", rt());
    net.zero_grads();
    for (uint64_t call = 0; call < 3; ++call) {
      net.set_input(100 + call);
      ASSERT_TRUE(graph.run(net.key(), [&] { net.micro_step(); }).ok());
      EXPECT_TRUE(same_bits(net.outputs(), eager[call])) << dtype_name(dt) << " call " << call;
    }
    EXPECT_EQ(graph.captures(), 1);
    EXPECT_EQ(graph.replays(), 2);
  }
}

TEST_F(GpuGraph, AnotherShapeOrBufferIsRecapturedAndStillEqualsEager) {
  Net big(16, DType::kBF16), small(8, DType::kBF16), twin(16, DType::kBF16);
  const auto eager_big = eager_run(big), eager_small = eager_run(small);
  const auto eager_twin = eager_run(twin);
  CudaStepGraph graph("mlp micro-step", rt());
  for (Net* n : {&big, &small, &twin}) n->zero_grads();
  struct Call {
    Net* net;
    const std::vector<std::vector<float>>* eager;
    int captures_after;
  };
  // small has other shapes; twin has big's shapes in other buffers: both must re-capture.
  const Call calls[] = {{&big, &eager_big, 1}, {&small, &eager_small, 2}, {&twin, &eager_twin, 3}};
  for (uint64_t round = 0; round < 3; ++round)
    for (const Call& c : calls) {
      c.net->set_input(100 + round);
      ASSERT_TRUE(graph.run(c.net->key(), [&] { c.net->micro_step(); }).ok());
      EXPECT_TRUE(same_bits(c.net->outputs(), (*c.eager)[round]))
          << "N=" << c.net->N << " round " << round;
      if (round == 0) EXPECT_EQ(graph.captures(), c.captures_after);
    }
  EXPECT_EQ(graph.captures(), 9) << "every key change re-captures";
  EXPECT_EQ(graph.replays(), 0);
}

TEST_F(GpuGraph, ALimitedGraphRefusesAnotherKeyByNameAndRunsNothing) {
  Net big(16, DType::kF32), small(8, DType::kF32);
  CudaStepGraph graph("optimizer step", rt(), /*max_captures=*/1);
  big.set_input(1);
  ASSERT_TRUE(graph.run(big.key(), [&] { big.micro_step(); }).ok());
  small.set_input(2);
  const std::vector<float> before = small.outputs();
  bool called = false;
  const absl::Status st = graph.run(small.key(), [&] {
    called = true;
    small.micro_step();
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("'optimizer step'"), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find("N=8"), std::string::npos) << st;
  EXPECT_FALSE(called);
  EXPECT_TRUE(same_bits(small.outputs(), before));
  EXPECT_TRUE(graph.run(big.key(), [&] { big.micro_step(); }).ok()) << "its own key replays";
  EXPECT_EQ(graph.replays(), 1);
}

TEST_F(GpuGraph, ASynchronizingStepIsRefusedByNameAndTheStreamRecovers) {
  Net net(8, DType::kF32);
  net.set_input(3);
  const std::vector<float> before = net.outputs();
  CudaStepGraph graph("mlp micro-step", rt());
  const absl::Status st = graph.run(net.key(), [&] {
    net.micro_step();
    (void)cudaStreamSynchronize(rt().stream());  // what a host read of the loss would need
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("'mlp micro-step'"), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find("cudaErrorStreamCaptureInvalidated"),
            std::string::npos)
      << st;
  EXPECT_FALSE(graph.holds_graph());
  EXPECT_TRUE(same_bits(net.outputs(), before)) << "nothing of a refused capture runs";
  net.micro_step();  // eager use of the stream works again
  EXPECT_FALSE(same_bits(net.outputs(), before));
}

TEST_F(GpuGraph, AHostReadInsideTheStepAbortsNamingTheGraph) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Net net(8, DType::kF32);
        net.set_input(4);
        CudaStepGraph graph("loss readback step", rt());
        (void)graph.run(net.key(), [&] {
          net.micro_step();
          (void)net.loss.to_host_f32();  // the host needs the value now: a graph cannot
        });
      },
      "while capturing the CUDA graph 'loss readback step'");
}

}  // namespace
}  // namespace vt
