// Activation recomputation (model/recompute.h: the whole block from its input, the attention core,
// the MLP activation) reruns in backward what forward dropped: the loss and every gradient must be
// bitwise those of the run that saved everything, for the value modes and the block shapes.
#include <gtest/gtest.h>

#include "../support/step_runner.h"
#include "model/recompute.h"
#include "model_test_util.h"

namespace vt {
namespace {

// `perturb`: the size of the offsets added to every parameter.
void expect_every_mode_equal(const ModelConfig& cfg, float perturb = 0.05f) {
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  auto run = [&](vt::Recompute recompute) {
    ParamStore store;
    GPT model(cfg);
    model.set_recompute(recompute);
    model.register_params(store);
    store.finalize();
    model.init_params(11);
    // Perturb every parameter so that zero-initialized gains and projections do not hide a term.
    std::vector<float> w = store.params_tensor().to_host_f32();
    for (size_t i = 0; i < w.size(); ++i)
      w[i] += perturb * static_cast<float>((i * 7919) % 13) / 13.0f;
    store.params_tensor().copy_from(Tensor::view(w.data(), {static_cast<int64_t>(w.size())}));
    const double loss = model.forward_backward(in.data(), tg.data(), 2, 1.0f / 64);
    return std::make_pair(loss, store.grads_tensor().to_host_f32());
  };
  const auto [loss_saved, grads_saved] = run(vt::Recompute::kOff);
  for (vt::Recompute r : {vt::Recompute::kAttn, vt::Recompute::kMlp, vt::Recompute::kBlock}) {
    SCOPED_TRACE(recompute_name(r));
    const auto [loss_re, grads_re] = run(r);
    EXPECT_EQ(loss_saved, loss_re);
    ASSERT_EQ(grads_saved.size(), grads_re.size());
    for (size_t i = 0; i < grads_saved.size(); ++i) ASSERT_EQ(grads_saved[i], grads_re[i]) << i;
    double any = 0;
    for (float g : grads_re) any += g * g;
    EXPECT_GT(any, 0.0);
  }
}

class Recompute : public ::testing::TestWithParam<ValueMode> {};

TEST_P(Recompute, GradientsEqualSavedActivations) {
  expect_every_mode_equal(testing::tiny_config(GetParam()));
}

class RecomputeShapes : public ::testing::TestWithParam<testing::Variant> {};

TEST_P(RecomputeShapes, GradientsEqualSavedActivations) {
  // Without norms (lr_scale < 1) the stream grows through the layers: smaller offsets.
  expect_every_mode_equal(testing::variant_config(GetParam()),
                          0.05f * static_cast<float>(GetParam().lr_scale));
}

INSTANTIATE_TEST_SUITE_P(Blocks, RecomputeShapes, ::testing::ValuesIn(testing::block_variants()),
                         [](const ::testing::TestParamInfo<testing::Variant>& i) {
                           return i.param.name;
                         });

INSTANTIATE_TEST_SUITE_P(Modes, Recompute,
                         ::testing::Values(ValueMode::kBaseline, ValueMode::kResformerDense,
                                           ValueMode::kResformerPlus, ValueMode::kX0v,
                                           ValueMode::kBov, ValueMode::kValueEmbed,
                                           ValueMode::kSvformer, ValueMode::kResformerHidden,
                                           ValueMode::kNeutreno),
                         [](const ::testing::TestParamInfo<ValueMode>& i) {
                           std::string s = value_mode_name(i.param);
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace vt
