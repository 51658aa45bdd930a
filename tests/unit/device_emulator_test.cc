// The device emulator runs the GPU code path on the CPU: device tensors that host code cannot
// touch, explicit copies, bf16 activations. These tests check the Tensor device API, and that a
// whole training step on the emulated device equals the CPU backend's (f32: bit for bit, the
// kernels are the same), and that bf16 activations stay within bf16 precision of f32.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/step_runner.h"
#include "../unit/model_test_util.h"
#include "core/backend.h"
#include "core/bf16.h"
#include "core/ops.h"
#include "plan/memory_estimate.h"

namespace vt {
namespace {

class Emulated : public ::testing::Test {
 protected:
  void SetUp() override { set_device_backend(make_device_emulator()); }
  void TearDown() override { set_device_backend(nullptr); }
};

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST_F(Emulated, DeviceTensorsMoveOnlyByCopies) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  Tensor d = Tensor::from_host(v.data(), {2, 3}, Device::kCUDA);
  EXPECT_EQ(d.device(), Device::kCUDA);
  EXPECT_FALSE(d.on_host());
  EXPECT_DEATH((void)d.f32(), "host access to a device tensor");
  EXPECT_EQ(d.to_host_f32(), v);
  EXPECT_EQ(d.item(4), 5.0);
  EXPECT_EQ(d.flat(2, 3).to_host_f32(), (std::vector<float>{3, 4, 5}));
  Tensor b = d.to(Device::kCUDA, DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(b.to_host_f32(), v);  // small integers are exact in bf16
  Tensor c = d.clone();
  ops::scale_copy(c, c, 2.0f);
  EXPECT_EQ(c.item(5), 12.0);
  EXPECT_EQ(d.item(5), 6.0);  // the clone owns its memory
  const size_t before = backend(Device::kCUDA).bytes_in_use();
  {
    Tensor big = Tensor::zeros({1000}, DType::kF32, Device::kCUDA);
    EXPECT_GE(backend(Device::kCUDA).bytes_in_use(), before + 4000);
  }
  EXPECT_EQ(backend(Device::kCUDA).bytes_in_use(), before);
  EXPECT_GE(backend(Device::kCUDA).peak_bytes(), before + 4000);
}

TEST_F(Emulated, MixedDevicesAreRefused) {
  Tensor h = Tensor::zeros({4});
  Tensor d = Tensor::zeros({4}, DType::kF32, Device::kCUDA);
  EXPECT_DEATH(ops::axpy(h, d), "different devices");
}

TEST_F(Emulated, Copy2dAndTranspose) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  Tensor x = Tensor::from_host(v.data(), {3, 4}, Device::kCUDA);
  Tensor y = Tensor::zeros({3, 2}, DType::kF32, Device::kCUDA);
  ops::copy_2d(y, 0, 2, x, 1, 4, 3, 2);  // columns 1..2
  EXPECT_EQ(y.to_host_f32(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  Tensor t = Tensor::zeros({4, 3}, DType::kF32, Device::kCUDA);
  ops::transpose(t, x, 3, 4);
  EXPECT_EQ(t.to_host_f32(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

// Every value mode's forward and backward on the emulated device equals the CPU's exactly.
class EmulatedModes : public Emulated, public ::testing::WithParamInterface<ValueMode> {};

TEST_P(EmulatedModes, ForwardBackwardEqualsCpu) {
  const ModelConfig cfg = testing::tiny_config(GetParam());
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  auto run = [&](Device d) {
    ParamStore store;
    GPT model(cfg);
    model.register_params(store);
    store.finalize(d, DType::kF32);
    model.init_params(7);
    const double loss = model.forward_backward(in.data(), tg.data(), 2, 1.0f / 64);
    return std::make_pair(loss, store.grads_tensor().to_host_f32());
  };
  const auto [cpu_loss, cpu_grads] = run(Device::kCPU);
  const auto [dev_loss, dev_grads] = run(Device::kCUDA);
  EXPECT_EQ(cpu_loss, dev_loss);
  ASSERT_EQ(cpu_grads.size(), dev_grads.size());
  for (size_t i = 0; i < cpu_grads.size(); ++i) ASSERT_EQ(cpu_grads[i], dev_grads[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, EmulatedModes,
    ::testing::Values(ValueMode::kBaseline, ValueMode::kResformerLearnable,
                      ValueMode::kResformerPlus, ValueMode::kResformerDense, ValueMode::kSvformer,
                      ValueMode::kV1, ValueMode::kX0v, ValueMode::kBov, ValueMode::kBovAdd,
                      ValueMode::kValueEmbed, ValueMode::kResformerHidden),
    [](const ::testing::TestParamInfo<ValueMode>& i) {
      std::string s = value_mode_name(i.param);
      for (char& c : s)
        if (c == '-') c = '_';
      return s;
    });

// Every block shape (with its options, NeuTRENO and DenseFormer) on the emulated device equals
// the CPU exactly: forward, backward and three training steps.
class EmulatedShapes : public Emulated, public ::testing::WithParamInterface<testing::Variant> {};

TEST_P(EmulatedShapes, TrainingStepsEqualCpu) {
  const ModelConfig cfg = testing::variant_config(GetParam());
  const double lr = GetParam().lr_scale;
  const testing::StepRun cpu = testing::run_steps(cfg, Device::kCPU, DType::kF32, 3, 2, 1234, lr);
  const testing::StepRun dev = testing::run_steps(cfg, Device::kCUDA, DType::kF32, 3, 2, 1234, lr);
  for (double l : cpu.losses) ASSERT_TRUE(std::isfinite(l)) << "training diverged";
  EXPECT_EQ(cpu.losses, dev.losses);
  ASSERT_EQ(cpu.first_grads.size(), dev.first_grads.size());
  for (size_t i = 0; i < cpu.first_grads.size(); ++i)
    ASSERT_EQ(cpu.first_grads[i], dev.first_grads[i]) << testing::param_at(cpu, i);
  for (size_t i = 0; i < cpu.final_params.size(); ++i)
    ASSERT_EQ(cpu.final_params[i], dev.final_params[i]) << testing::param_at(cpu, i);
}

INSTANTIATE_TEST_SUITE_P(Blocks, EmulatedShapes, ::testing::ValuesIn(testing::block_variants()),
                         [](const ::testing::TestParamInfo<testing::Variant>& i) {
                           return i.param.name;
                         });

// Whole training steps (forward, backward, Muon + AdamW) on the emulated device equal the CPU.
TEST_F(Emulated, TrainingStepsEqualCpu) {
  for (ValueMode mode : {ValueMode::kBaseline, ValueMode::kBov, ValueMode::kValueEmbed}) {
    const ModelConfig cfg = testing::tiny_config(mode);
    const testing::StepRun cpu = testing::run_steps(cfg, Device::kCPU, DType::kF32, 3, 2);
    const testing::StepRun dev = testing::run_steps(cfg, Device::kCUDA, DType::kF32, 3, 2);
    EXPECT_EQ(cpu.losses, dev.losses) << value_mode_name(mode);
    ASSERT_EQ(cpu.final_params.size(), dev.final_params.size());
    for (size_t i = 0; i < cpu.final_params.size(); ++i)
      ASSERT_EQ(cpu.final_params[i], dev.final_params[i])
          << value_mode_name(mode) << " " << testing::param_at(cpu, i);
  }
}

// bf16 activations: the loss stays within bf16 precision of the f32 model's, and the gradient
// points the same way. Tolerances: bf16 keeps 8 significant bits (relative rounding 2^-9 per
// store); a forward pass stores ~15 times per layer, so the loss (a mean over 64 tokens of
// quantities of order log V ~ 5.5) is allowed 1%; the gradient's cosine with f32 >= 0.99.
TEST_F(Emulated, Bf16ActivationsStayCloseToF32) {
  for (ValueMode mode : {ValueMode::kBaseline, ValueMode::kBov, ValueMode::kResformerPlus}) {
    const ModelConfig cfg = testing::tiny_config(mode);
    const testing::StepRun f32 = testing::run_steps(cfg, Device::kCPU, DType::kF32, 1, 2);
    const testing::StepRun bf = testing::run_steps(cfg, Device::kCUDA, DType::kBF16, 1, 2);
    EXPECT_NEAR(bf.losses[0], f32.losses[0], 0.01 * f32.losses[0]) << value_mode_name(mode);
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < f32.first_grads.size(); ++i) {
      dot += double(f32.first_grads[i]) * bf.first_grads[i];
      na += double(f32.first_grads[i]) * f32.first_grads[i];
      nb += double(bf.first_grads[i]) * bf.first_grads[i];
    }
    EXPECT_GT(dot / std::sqrt(na * nb), 0.99) << value_mode_name(mode);
    // And bf16 really rounds: the gradients are not bitwise the f32 ones.
    EXPECT_NE(bf.first_grads, f32.first_grads);
  }
}

// A short bf16 run on the emulated device learns the pattern: the loss falls.
TEST_F(Emulated, Bf16TrainingLossFalls) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBov);
  const testing::StepRun r = testing::run_steps(cfg, Device::kCUDA, DType::kBF16, 25, 2);
  EXPECT_LT(r.losses.back(), 0.6 * r.losses.front())
      << "first " << r.losses.front() << " last " << r.losses.back();
}

// The start-up memory estimate's activation term against what a forward pass really keeps on
// the (emulated) device, under each recomputation mode: within 10%, for every --recompute mode.
TEST_F(Emulated, MemoryEstimateMatchesForwardActivations) {
  std::vector<std::pair<std::string, ModelConfig>> cfgs = {
      {"baseline", testing::tiny_config(ValueMode::kBaseline, 64)},
      {"bov", testing::tiny_config(ValueMode::kBov, 64)}};
  for (const testing::Variant& v : testing::block_variants())
    if (v.name == "sas" || v.name == "vskipinit_neutreno" || v.name == "dense_bov")
      cfgs.push_back({v.name, testing::variant_config(v, 64)});
  for (const auto& [name, cfg] : cfgs) {
    for (Recompute recompute :
         {Recompute::kOff, Recompute::kAttn, Recompute::kMlp, Recompute::kBlock}) {
      const int B = 4;
      ParamStore store;
      GPT model(cfg);
      model.set_recompute(recompute);
      model.register_params(store);
      store.finalize(Device::kCUDA, DType::kBF16);
      model.init_params(3);
      std::vector<int32_t> in, tg;
      testing::pattern_batch(cfg, B, 0, in, tg);
      const double base = static_cast<double>(backend(Device::kCUDA).bytes_in_use());
      Activations acts;
      model.start_activations(acts, in.data(), tg.data(), B);
      Bundle b = model.embed_forward(acts);
      model.blocks_forward(b, acts);
      const double measured = backend(Device::kCUDA).bytes_in_use() - base;
      const double est = estimate_memory(cfg, store, GridShape{}, GridCoords{}, cfg.n_layer, B,
                                         DType::kBF16, recompute)
                             .activations;
      EXPECT_NEAR(measured, est, 0.10 * est)
          << name << " recompute " << recompute_name(recompute) << ": measured " << measured
          << " estimated " << est;
    }
  }
}

}  // namespace
}  // namespace vt
