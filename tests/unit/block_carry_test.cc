// The block boundary's fusion (GPT::blocks_forward, BlockKit::residual_add): a block's last
// residual add is left to the next block, which makes it with its input copy and first norm in
// one ops::add_rmsnorm. A forward hook turns it off (the hook reads the stream between blocks),
// so a pass with a no-op hook is the unfused path: the loss and every gradient must be bitwise
// those of the fused pass, and the op counts say which path each pass took.
#include <gtest/gtest.h>

#include "../support/step_runner.h"
#include "core/backend.h"
#include "core/op_profile.h"
#include "model/recompute.h"
#include "model_test_util.h"

namespace vt {
namespace {

struct Pass {
  double loss = 0;
  std::vector<float> grads;
  int64_t add_rmsnorm = 0, rmsnorm = 0, axpy = 0;
};

int64_t calls(const std::vector<op_profile::Entry>& es, const std::string& op) {
  for (const auto& e : es)
    if (e.op == op) return e.calls;
  return 0;
}

void init_perturbed(GPT& model, ParamStore& store, float perturb) {
  model.init_params(11);
  std::vector<float> w = store.params_tensor().to_host_f32();
  for (size_t i = 0; i < w.size(); ++i)
    w[i] += perturb * static_cast<float>((i * 7919) % 13) / 13.0f;
  store.params_tensor().copy_from(Tensor::view(w.data(), {static_cast<int64_t>(w.size())}));
}

// One forward and backward of a perturbed model (zero-initialized projections would hide the
// terms), counting the forward's ops; `hooked`: with a forward hook that does nothing.
Pass run(const ModelConfig& cfg, Recompute recompute, bool hooked, float perturb = 0.05f,
         Device device = Device::kCPU, DType act = DType::kF32) {
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  ParamStore store;
  GPT model(cfg);
  model.set_recompute(recompute);
  model.register_params(store);
  store.finalize(device, act);
  init_perturbed(model, store, perturb);

  PassHooks hooks;
  int seen = 0;
  if (hooked) hooks.block_output = [&](int, const Tensor&) { ++seen; };
  Pass p;
  Activations acts;
  model.start_activations(acts, in.data(), tg.data(), 2);
  op_profile::reset();
  op_profile::enable(true);
  Bundle bundle = model.embed_forward(acts, hooks);
  model.blocks_forward(bundle, acts, hooks);
  p.loss = model.head_forward(bundle, acts);
  const auto es = op_profile::entries();
  op_profile::enable(false);
  op_profile::reset();
  p.add_rmsnorm = calls(es, "add_rmsnorm");
  p.rmsnorm = calls(es, "rmsnorm");
  p.axpy = calls(es, "axpy");
  Bundle grad = model.head_backward(acts, 1.0f / 64);
  model.blocks_backward(grad, acts, hooks);
  model.embed_backward(grad, acts);
  p.grads = store.grads_tensor().to_host_f32();
  if (hooked) EXPECT_EQ(seen, cfg.n_layer + 1);  // the embedding and every block
  return p;
}

void expect_same(const Pass& fused, const Pass& plain) {
  EXPECT_EQ(fused.loss, plain.loss);
  ASSERT_EQ(fused.grads.size(), plain.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i) ASSERT_EQ(fused.grads[i], plain.grads[i]) << i;
  double any = 0;
  for (float g : fused.grads) any += double(g) * g;
  EXPECT_GT(any, 0.0);
}

// Prenorm (the baseline shape) with value modes that read V1 or x0, under every --recompute:
// every boundary but the last fuses (L - 1 more add_rmsnorm, L - 1 fewer rmsnorm and axpy).
class Carry : public ::testing::TestWithParam<ValueMode> {};

TEST_P(Carry, FusedBoundaryEqualsUnfusedBitwise) {
  const ModelConfig cfg = testing::tiny_config(GetParam());
  const int64_t L = cfg.n_layer;
  for (Recompute r : {Recompute::kOff, Recompute::kAttn, Recompute::kMlp, Recompute::kBlock}) {
    SCOPED_TRACE(recompute_name(r));
    const Pass fused = run(cfg, r, false), plain = run(cfg, r, true);
    expect_same(fused, plain);
    // Unfused: one add_rmsnorm per block (the attention add with the MLP norm); rmsnorm for
    // the embedding, each block's input and the head.
    EXPECT_EQ(plain.add_rmsnorm, L);
    EXPECT_EQ(plain.rmsnorm, L + 2);
    EXPECT_EQ(fused.add_rmsnorm, 2 * L - 1);
    EXPECT_EQ(fused.rmsnorm, 3);
    EXPECT_EQ(plain.axpy - fused.axpy, L - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Carry,
                         ::testing::Values(ValueMode::kBaseline, ValueMode::kResformerDense,
                                           ValueMode::kBov, ValueMode::kX0v,
                                           ValueMode::kResformerHidden),
                         [](const ::testing::TestParamInfo<ValueMode>& i) {
                           std::string s = value_mode_name(i.param);
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// The other shapes: equal bitwise; the ones whose next block opens with a norm fuse L - 1
// boundaries, DenseFormer (its average reads the stream after each block) and sas without norms
// (`--norm none`: no norm after layer 0 to fuse with) none.
class CarryShapes : public ::testing::TestWithParam<testing::Variant> {};

TEST_P(CarryShapes, FusedBoundaryEqualsUnfusedBitwise) {
  const testing::Variant& v = GetParam();
  const ModelConfig cfg = testing::variant_config(v);
  const float perturb = 0.05f * static_cast<float>(v.lr_scale);
  for (Recompute r : {Recompute::kOff, Recompute::kBlock}) {
    SCOPED_TRACE(recompute_name(r));
    const Pass fused = run(cfg, r, false, perturb), plain = run(cfg, r, true, perturb);
    expect_same(fused, plain);
    const bool fuses = !cfg.dense && !cfg.norm_none;
    EXPECT_EQ(fused.add_rmsnorm - plain.add_rmsnorm, fuses ? cfg.n_layer - 1 : 0);
    EXPECT_EQ(plain.rmsnorm - fused.rmsnorm, fuses ? cfg.n_layer - 1 : 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, CarryShapes, ::testing::ValuesIn(testing::block_variants()),
                         [](const ::testing::TestParamInfo<testing::Variant>& i) {
                           return i.param.name;
                         });

// On the emulated CUDA device: bitwise the unfused pass with f32 and with bf16 activations
// (the fused kernel rounds the new stream to bf16 before it normalizes it, as the unfused copy
// does), and with f32 bitwise the CPU.
TEST(CarryDevice, EmulatedFusedBoundaryEqualsUnfusedAndCpu) {
  set_device_backend(make_device_emulator());
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBov);
  const Pass cpu = run(cfg, Recompute::kOff, false);
  for (DType act : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(act == DType::kF32 ? "f32" : "bf16");
    const Pass fused = run(cfg, Recompute::kOff, false, 0.05f, Device::kCUDA, act);
    const Pass plain = run(cfg, Recompute::kOff, true, 0.05f, Device::kCUDA, act);
    expect_same(fused, plain);
    EXPECT_EQ(fused.add_rmsnorm, 2 * cfg.n_layer - 1);
    EXPECT_EQ(plain.add_rmsnorm, cfg.n_layer);
    if (act == DType::kF32) expect_same(fused, cpu);
    else EXPECT_NE(fused.grads, cpu.grads);  // bf16 really rounds
  }
  set_device_backend(nullptr);
}

// A forward that only reads (a block_state hook, as diagnostics set) is unfused as well.
TEST(CarryHooks, BlockStateHookSeesTheStreamAfterEachBlock) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize();
  init_perturbed(model, store, 0.05f);  // W_proj = 0 at init would make every MLP add zero
  std::vector<std::vector<float>> with_state, with_output;
  for (int pass = 0; pass < 2; ++pass) {
    PassHooks hooks;
    if (pass == 0)
      hooks.block_state = [&](int, const BlockActs&, const Bundle& b, const Activations&) {
        with_state.push_back(b.x.to_host_f32());
      };
    else
      hooks.block_output = [&](int layer, const Tensor& x) {
        if (layer >= 0) with_output.push_back(x.to_host_f32());
      };
    Activations acts;
    model.start_activations(acts, in.data(), tg.data(), 2);
    Bundle b = model.embed_forward(acts, hooks);
    model.blocks_forward(b, acts, hooks);
  }
  ASSERT_EQ(with_state.size(), static_cast<size_t>(cfg.n_layer));
  EXPECT_EQ(with_state, with_output);
}

}  // namespace
}  // namespace vt
