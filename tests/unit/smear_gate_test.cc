// The smear gate (model/smear_gate.h) on the CPU backend: forward equals the formula of
// docs/model.md written out here in double (position 0 of each row untouched, rows do not leak
// into each other), backward equals its derivatives written out by hand, registration puts both
// parameters in ParamGroup::kSmear at nanochat's init, and the decoder's one-token step agrees
// with the sequence forward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/smear_gate.h"
#include "model_test_util.h"

namespace vt {
namespace {

const ParamInfo& store_info(const ParamStore& s, const std::string& name) {
  const int i = s.find(name);
  EXPECT_GE(i, 0) << name;
  return s.info(i);
}

struct Fixture {
  ModelConfig cfg;
  ParamStore store;
  std::unique_ptr<GPT> model;
  Fixture() {
    cfg = testing::tiny_config(ValueMode::kBaseline);
    cfg.smear_gate = true;
    EXPECT_TRUE(cfg.finalize().ok());
    model = std::make_unique<GPT>(cfg);
    model->register_params(store);
    store.finalize();
    model->init_params(11);
  }
  float* w() { return store.param("smear.gate_w").f32(); }
  float* lam() { return store.param("smear.lambda").f32(); }
};

TEST(SmearGate, RegistersNanochatInit) {
  Fixture f;
  const ParamInfo& w = store_info(f.store, "smear.gate_w");
  EXPECT_EQ(w.group, ParamGroup::kSmear);
  EXPECT_EQ(w.global_shape, (Shape{24, 1}));
  EXPECT_EQ(store_info(f.store, "smear.lambda").group, ParamGroup::kSmear);
  EXPECT_EQ(f.lam()[0], 0.0f);
  for (int c = 0; c < 24; ++c) {
    EXPECT_GE(f.w()[c], 0.0f);
    EXPECT_LE(f.w()[c], 0.02f);
  }
  // Off by default: no parameters.
  ModelConfig off = testing::tiny_config(ValueMode::kBaseline);
  EXPECT_EQ(f.cfg.param_count() - off.param_count(), 25);
}

TEST(SmearGate, ForwardAndBackwardMatchTheFormula) {
  Fixture f;
  Rng rng(5);
  for (int c = 0; c < 24; ++c) f.w()[c] = static_cast<float>(rng.normal(0, 0.3));
  f.lam()[0] = 0.7f;
  const int B = 2, T = 5, C = f.cfg.n_embd;
  std::vector<float> x(B * T * C), dy(B * T * C);
  for (auto& v : x) v = static_cast<float>(rng.normal(0, 1));
  for (auto& v : dy) v = static_cast<float>(rng.normal(0, 1));
  smear::Acts acts;
  const smear::Params& p = f.model->smear_params();
  ASSERT_TRUE(p.on());
  Tensor xt = Tensor::zeros({B, T, C});
  std::copy(x.begin(), x.end(), xt.f32());
  const Tensor y = smear::forward(f.store, p, B, T, xt, acts);
  f.store.zero_grads();
  Tensor dyt = Tensor::zeros({B, T, C});
  std::copy(dy.begin(), dy.end(), dyt.f32());
  const Tensor dx = smear::backward(f.store, p, B, T, acts, dyt);

  std::vector<double> want_dx(x.begin(), x.end());
  for (int i = 0; i < B * T * C; ++i) want_dx[i] = dy[i];
  std::vector<double> dw(24, 0.0);
  double dlam = 0;
  const double lam = f.lam()[0];
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* xr = &x[(b * T + t) * C];
      const float* yr = y.f32() + (b * T + t) * C;
      if (t == 0) {  // untouched, and nothing flows from the previous row's last position
        for (int c = 0; c < C; ++c) EXPECT_EQ(yr[c], xr[c]);
        continue;
      }
      const float* xp = xr - C;
      const float* dyr = &dy[(b * T + t) * C];
      double z = 0;
      for (int c = 0; c < 24; ++c) z += double(xr[c]) * f.w()[c];
      const double g = 1 / (1 + std::exp(-z));
      double s = 0;  // dy[t] . x[t-1]
      for (int c = 0; c < C; ++c) {
        EXPECT_NEAR(yr[c], xr[c] + lam * g * xp[c], 1e-5);
        s += double(dyr[c]) * xp[c];
        want_dx[(b * T + t - 1) * C + c] += lam * g * dyr[c];
      }
      dlam += g * s;
      const double dz = lam * s * g * (1 - g);
      for (int c = 0; c < 24; ++c) {
        dw[c] += dz * xr[c];
        want_dx[(b * T + t) * C + c] += dz * f.w()[c];
      }
    }
  for (int i = 0; i < B * T * C; ++i) EXPECT_NEAR(dx.f32()[i], want_dx[i], 1e-4) << i;
  EXPECT_NEAR(f.store.grad("smear.lambda").f32()[0], dlam, 1e-4 * (1 + std::fabs(dlam)));
  for (int c = 0; c < 24; ++c)
    EXPECT_NEAR(f.store.grad("smear.gate_w").f32()[c], dw[c], 1e-4 * (1 + std::fabs(dw[c])));
}

TEST(SmearGate, DecodeStepMatchesTheSequenceForward) {
  Fixture f;
  f.lam()[0] = -0.4f;
  Rng rng(8);
  const int C = f.cfg.n_embd;
  std::vector<float> x(2 * C);
  for (auto& v : x) v = static_cast<float>(rng.normal(0, 1));
  Tensor xt = Tensor::zeros({1, 2, C});
  std::copy(x.begin(), x.end(), xt.f32());
  smear::Acts acts;
  const Tensor y = smear::forward(f.store, f.model->smear_params(), 1, 2, xt, acts);
  std::vector<float> one(x.begin() + C, x.end());
  smear::decode_step(f.store, f.model->smear_params(), one.data(), x.data(), C);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(one[c], y.f32()[C + c], 1e-6);
}

}  // namespace
}  // namespace vt
