// The fused loss end: ops::xent_loss_grad (core/ops/xent.h) against the unfused ops on the host
// path (f32 and bf16 tensors, in place and out of place), and GPT's training loss end, which
// runs it when the head holds the whole vocabulary (GPT::head_forward given a grad scale),
// against the unfused pass: the loss and every gradient bitwise, one logits-sized buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../support/step_runner.h"

#include "core/backend.h"
#include "core/bf16.h"
#include "core/op_profile.h"
#include "core/ops/xent.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "plan/memory_estimate.h"

namespace vt {
namespace {

std::vector<float> randn(int64_t n, uint64_t seed, float stddev) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

Tensor host_tensor(const std::vector<float>& v, Shape s, DType dt) {
  Tensor t = Tensor::from_host(v.data(), std::move(s), Device::kCPU);
  return dt == DType::kF32 ? t : t.to(Device::kCPU, dt);
}

std::vector<uint16_t> bits_bf16(const Tensor& t) {
  std::vector<uint16_t> b(t.numel());
  std::memcpy(b.data(), t.raw(), b.size() * sizeof(uint16_t));
  return b;
}

// One slice of 300 columns, 280 valid, at column offset 500 (targets inside, outside, one on a
// padding column); std 8 against cap 15 so the cap matters.
struct Case {
  static constexpr int64_t N = 23, ld = 300, n_valid = 280, col_offset = 500;
  static constexpr float cap = 15.0f, grad_scale = 0.37f;
  std::vector<float> logits = randn(N * ld, 7, 8.0f);
  std::vector<int32_t> targets;
  Case() {
    for (int64_t n = 0; n < N; ++n) targets.push_back(int32_t((n * 131) % 1200));
    targets[0] = int32_t(col_offset), targets[1] = int32_t(col_offset + n_valid - 1);
    targets[2] = int32_t(col_offset + n_valid);  // padding: not a target here
    targets[3] = 3;                              // before the slice
  }
  XentArgs args(const Tensor& l, const Tensor& t) const {
    XentArgs x;
    x.logits = l, x.targets = t, x.n_valid = n_valid, x.col_offset = col_offset, x.cap = cap;
    return x;
  }
};

// On the host both paths widen the logits to f32 and run the same arithmetic (cpu_kernels.h
// xent_loss_grad repeats the unfused kernels'), and a bf16 gradient is rounded once from the
// same f32 value: lse, loss and dlogits are equal bit for bit for f32 and bf16 tensors.
TEST(XentLossGrad, EqualsUnfusedOpsBitForBit) {
  const Case k;
  const Tensor tg = Tensor::from_host(k.targets.data(), {Case::N}, Device::kCPU);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor logits = host_tensor(k.logits, {Case::N, Case::ld}, dt);
    Tensor mx = Tensor::zeros({Case::N}, DType::kF32), se = mx.clone(), tz = mx.clone();
    Tensor lse = mx.clone(), loss = mx.clone();
    ops::xent_partial(k.args(logits, tg), mx, se, tz);
    ops::xent_finish(mx, se, tz, lse, loss);
    Tensor dl = Tensor::zeros({Case::N, Case::ld}, dt);
    ops::xent_backward(k.args(logits, tg), lse, Case::grad_scale, dl);
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "out of place");
      Tensor src = logits.clone();
      Tensor out = in_place ? src : Tensor::zeros({Case::N, Case::ld}, dt);
      Tensor flse = Tensor::zeros({Case::N}, DType::kF32), floss = flse.clone();
      ops::xent_loss_grad(k.args(src, tg), Case::grad_scale, flse, floss, out);
      EXPECT_EQ(flse.to_host_f32(), lse.to_host_f32());
      EXPECT_EQ(floss.to_host_f32(), loss.to_host_f32());
      if (dt == DType::kBF16) EXPECT_EQ(bits_bf16(out), bits_bf16(dl));
      else EXPECT_EQ(out.to_host_f32(), dl.to_host_f32());
      if (!in_place) EXPECT_EQ(src.to_host_f32(), logits.to_host_f32());
      const auto got = out.to_host_f32();
      for (int64_t n = 0; n < Case::N; ++n)
        for (int64_t c = Case::n_valid; c < Case::ld; ++c) ASSERT_EQ(got[n * Case::ld + c], 0.0f);
    }
  }
}

// bf16 against f32 tensors holding the same (bf16) values: the statistics are f32 from the same
// widened values (equal), and each gradient differs only by its final rounding to bf16, at most
// half a bf16 ulp: |d_bf16 - d_f32| <= 2^-8 |d_f32| (8 significant bits, round to nearest).
TEST(XentLossGrad, Bf16GradientIsTheF32OneRoundedOnce) {
  const Case k;
  const Tensor tg = Tensor::from_host(k.targets.data(), {Case::N}, Device::kCPU);
  const Tensor lb = host_tensor(k.logits, {Case::N, Case::ld}, DType::kBF16);
  const Tensor lf = lb.to(Device::kCPU, DType::kF32);
  Tensor lse_b = Tensor::zeros({Case::N}, DType::kF32), loss_b = lse_b.clone();
  Tensor lse_f = lse_b.clone(), loss_f = lse_b.clone();
  Tensor db = lb.clone(), df = lf.clone();
  ops::xent_loss_grad(k.args(db, tg), Case::grad_scale, lse_b, loss_b, db);
  ops::xent_loss_grad(k.args(df, tg), Case::grad_scale, lse_f, loss_f, df);
  EXPECT_EQ(lse_b.to_host_f32(), lse_f.to_host_f32());
  EXPECT_EQ(loss_b.to_host_f32(), loss_f.to_host_f32());
  const auto gb = db.to_host_f32(), gf = df.to_host_f32();
  int64_t rounded = 0;
  for (size_t i = 0; i < gf.size(); ++i) {
    ASSERT_LE(std::fabs(gb[i] - gf[i]), std::ldexp(std::fabs(gf[i]), -8)) << i;
    rounded += gb[i] != gf[i];
  }
  EXPECT_GT(rounded, 0);  // bf16 really rounds
}

TEST(XentLossGrad, RefusesMismatchedShapes) {
  const Case k;
  const Tensor tg = Tensor::from_host(k.targets.data(), {Case::N}, Device::kCPU);
  const Tensor l = host_tensor(k.logits, {Case::N, Case::ld}, DType::kF32);
  Tensor lse = Tensor::zeros({Case::N}, DType::kF32), loss = lse.clone();
  EXPECT_DEATH(ops::xent_loss_grad(k.args(l, tg), 1.0f, lse, loss,
                                   Tensor::zeros({Case::N, Case::ld - 1}, DType::kF32)),
               "check failed");
  EXPECT_DEATH(ops::xent_loss_grad(k.args(l, tg), 1.0f, Tensor::zeros({1}, DType::kF32), loss,
                                   l.clone()),
               "check failed");
}

// ---------------------------------------------------------------------------------------------
// The model's loss end

struct Pass {
  double loss = 0;
  std::vector<float> grads;
  int64_t fused = 0, unfused = 0;  // xent_loss_grad calls; xent_backward calls
  double head_peak = 0;            // device bytes above the blocks' forward, head fwd + bwd
  double logits_estimate = 0;      // vtrain plan's estimate of the loss end's logits
};

int64_t calls(const std::vector<op_profile::Entry>& es, const std::string& op) {
  for (const auto& e : es)
    if (e.op == op) return e.calls;
  return 0;
}

// One forward and backward of a perturbed tiny model; `fused`: head_forward is given the grad
// scale (the training path), else the unfused pass (evaluation's head_forward, then the
// backward computing the logits' gradient).
Pass run(bool fused, Device device = Device::kCPU, DType act = DType::kF32) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBov);
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize(device, act);
  model.init_params(11);
  std::vector<float> w = store.params_tensor().to_host_f32();
  for (size_t i = 0; i < w.size(); ++i)  // zero-initialized projections would hide terms
    w[i] += 0.05f * static_cast<float>((i * 7919) % 13) / 13.0f;
  store.params_tensor().copy_from(Tensor::view(w.data(), {static_cast<int64_t>(w.size())}));
  const float scale = 1.0f / 64;
  Pass p;
  Activations acts;
  model.start_activations(acts, in.data(), tg.data(), 2);
  Bundle bundle = model.embed_forward(acts);
  model.blocks_forward(bundle, acts);
  Backend& be = backend(device);
  be.reset_peak();
  const double base = static_cast<double>(be.bytes_in_use());
  op_profile::reset();
  op_profile::enable(true);
  p.loss = fused ? model.head_forward(bundle, acts, scale) : model.head_forward(bundle, acts);
  EXPECT_EQ(acts.logits.defined(), !fused);
  EXPECT_EQ(acts.dlogits.defined(), fused);
  Bundle grad = model.head_backward(acts, scale);
  const auto es = op_profile::entries();
  op_profile::enable(false);
  op_profile::reset();
  p.head_peak = static_cast<double>(be.peak_bytes()) - base;
  p.fused = calls(es, "xent_loss_grad");
  p.unfused = calls(es, "xent_backward");
  model.blocks_backward(grad, acts);
  model.embed_backward(grad, acts);
  p.grads = store.grads_tensor().to_host_f32();
  p.logits_estimate = estimate_memory(cfg, store, GridShape{}, GridCoords{}, cfg.n_layer, 2, act,
                                      Recompute::kOff)
                          .logits;
  return p;
}

// The CPU's and the emulated device's f32 and bf16 passes (both the host path): the loss and
// every gradient bitwise the unfused pass's (the host op is bitwise the unfused ops). On the
// emulated device, whose allocations are counted, the fused pass holds one logits-sized buffer
// fewer, and its peak is what vtrain plan's estimate counts for the loss end.
TEST(XentLossGradModel, TrainingLossEndEqualsUnfusedBitwise) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBov);
  const int64_t N = 2 * cfg.seq_len;
  set_device_backend(make_device_emulator());
  for (Device dev : {Device::kCPU, Device::kCUDA}) {
    for (DType act : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << (dev == Device::kCPU ? "cpu " : "emulated ")
                                      << dtype_name(act));
      const Pass f = run(true, dev, act), u = run(false, dev, act);
      EXPECT_EQ(f.fused, 1);
      EXPECT_EQ(f.unfused, 0);
      EXPECT_EQ(u.fused, 0);
      EXPECT_EQ(u.unfused, 1);
      EXPECT_EQ(f.loss, u.loss);
      ASSERT_EQ(f.grads.size(), u.grads.size());
      for (size_t i = 0; i < f.grads.size(); ++i) ASSERT_EQ(f.grads[i], u.grads[i]) << i;
      double any = 0;
      for (float g : f.grads) any += double(g) * g;
      EXPECT_GT(any, 0.0);
      if (dev == Device::kCPU) continue;
      const double logits_bytes = static_cast<double>(N * cfg.vocab_padded * dtype_size(act));
      EXPECT_EQ(u.head_peak - f.head_peak, logits_bytes);
      // The plan's loss-end term (tp 1: one logits buffer, and the head's (N, C) tensors and
      // f32 statistics) is the fused loss end's peak.
      EXPECT_NEAR(f.head_peak, f.logits_estimate, 0.02 * f.logits_estimate);
    }
  }
  set_device_backend(nullptr);
}

// GPT::forward_backward (what the training steps run on one stage) takes the fused path when
// it runs the backward, and evaluation's forward leaves the logits and computes no gradient.
TEST(XentLossGradModel, ForwardBackwardFusesOnlyWithABackward) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize();
  model.init_params(5);
  for (bool backward : {true, false}) {
    op_profile::reset();
    op_profile::enable(true);
    model.forward_backward(in.data(), tg.data(), 2, 1.0f / 64, backward);
    const auto es = op_profile::entries();
    op_profile::enable(false);
    op_profile::reset();
    EXPECT_EQ(calls(es, "xent_loss_grad"), backward ? 1 : 0);
    EXPECT_EQ(calls(es, "xent_partial"), backward ? 0 : 1);
    EXPECT_EQ(calls(es, "xent_backward"), 0);
  }
}

}  // namespace
}  // namespace vt
