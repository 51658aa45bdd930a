// Activation recomputation reruns each block's forward in backward from its saved input: the
// loss and every gradient must be bitwise those of the run that saved everything.
#include <gtest/gtest.h>

#include "../support/step_runner.h"
#include "model_test_util.h"

namespace vt {
namespace {

class Recompute : public ::testing::TestWithParam<ValueMode> {};

TEST_P(Recompute, GradientsEqualSavedActivations) {
  const ModelConfig cfg = testing::tiny_config(GetParam());
  std::vector<int32_t> in, tg;
  testing::pattern_batch(cfg, 2, 0, in, tg);
  auto run = [&](bool recompute) {
    ParamStore store;
    GPT model(cfg);
    model.set_recompute(recompute);
    model.register_params(store);
    store.finalize();
    model.init_params(11);
    const double loss = model.forward_backward(in.data(), tg.data(), 2, 1.0f / 64);
    return std::make_pair(loss, store.grads_tensor().to_host_f32());
  };
  const auto [loss_saved, grads_saved] = run(false);
  const auto [loss_re, grads_re] = run(true);
  EXPECT_EQ(loss_saved, loss_re);
  ASSERT_EQ(grads_saved.size(), grads_re.size());
  for (size_t i = 0; i < grads_saved.size(); ++i) ASSERT_EQ(grads_saved[i], grads_re[i]) << i;
  double any = 0;
  for (float g : grads_re) any += g * g;
  EXPECT_GT(any, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Modes, Recompute,
                         ::testing::Values(ValueMode::kBaseline, ValueMode::kResformerDense,
                                           ValueMode::kResformerPlus, ValueMode::kX0v,
                                           ValueMode::kBov, ValueMode::kValueEmbed,
                                           ValueMode::kSvformer, ValueMode::kResformerHidden),
                         [](const ::testing::TestParamInfo<ValueMode>& i) {
                           std::string s = value_mode_name(i.param);
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace vt
