// Decoder: for every value mode, token-by-token decoding over the mode-aware KV cache gives the
// same logits as the full-sequence training forward; and the cache keeps what the papers say
// (no V for bov targets, only layer 0's V for svformer).
#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "core/rng.h"
#include "model/decode.h"
#include "model/gpt.h"
#include "model_test_util.h"

namespace vt {
namespace {

ModelConfig tiny(ValueMode mode) { return testing::tiny_config(mode, 24); }

// Token-by-token decoding of cfg equals the full-sequence forward (max |logit diff| < 2e-4).
void expect_decoding_matches(const ModelConfig& cfg, const std::string& what) {
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize();
  model.init_params(7);
  Rng rng(3);
  for (int i = 0; i < store.size(); ++i) {  // move off init so every path matters
    Tensor p = store.param(i);
    for (int64_t j = 0; j < p.numel(); ++j) p.f32()[j] += rng.normal(0, 0.05);
  }
  const int T = cfg.seq_len;
  std::vector<int32_t> ids(T), tg(T, 0);
  for (auto& t : ids) t = rng.next_u64() % cfg.vocab_size;
  Activations acts;
  model.start_activations(acts, ids.data(), tg.data(), 1);
  Bundle b = model.embed_forward(acts);
  model.blocks_forward(b, acts);
  model.head_forward(b, acts);
  Decoder dec(model, T);
  const float cap = cfg.logit_softcap;
  double max_err = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<float> l = dec.step(ids[t]);
    ASSERT_EQ(static_cast<int>(l.size()), cfg.vocab_size);
    for (int c = 0; c < cfg.vocab_size; ++c) {
      const float full = cap * std::tanh(acts.logits.f32()[t * cfg.vocab_padded + c] / cap);
      max_err = std::max(max_err, static_cast<double>(std::fabs(full - l[c])));
    }
  }
  EXPECT_LT(max_err, 2e-4) << what;
}

class DecodeModes : public ::testing::TestWithParam<ValueMode> {};

TEST_P(DecodeModes, MatchesFullForward) {
  expect_decoding_matches(tiny(GetParam()), value_mode_name(GetParam()));
}

// Block shapes (shaped attention through the running window sum, identity/reparameterized
// projections, the E-SPA bias), NeuTRENO and DenseFormer, with a window shorter than T.
class DecodeShapes : public ::testing::TestWithParam<testing::Variant> {};

TEST_P(DecodeShapes, MatchesFullForward) {
  expect_decoding_matches(testing::variant_config(GetParam(), 24), GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Blocks, DecodeShapes, ::testing::ValuesIn(testing::block_variants()),
                         [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(AllModes, DecodeModes, ::testing::ValuesIn(all_value_modes()),
                         [](const auto& info) {
                           std::string n = value_mode_name(info.param);
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Decode, CacheFollowsTheValueMode) {
  auto bytes = [](ValueMode m) {
    ModelConfig cfg = tiny(m);
    ParamStore store;
    GPT model(cfg);
    model.register_params(store);
    store.finalize();
    model.init_params(1);
    Decoder dec(model, 8);
    return std::make_pair(dec.kv_bytes_per_token(), dec.baseline_kv_bytes_per_token());
  };
  const int64_t K = 2 * 16 * 4;  // kv_heads * hd * fp32 bytes
  auto [base, base_ref] = bytes(ValueMode::kBaseline);
  EXPECT_EQ(base, base_ref);
  EXPECT_EQ(base, 6 * 2 * K);
  // bov: last third (layers 4, 5) keeps keys only, plus one token id.
  EXPECT_EQ(bytes(ValueMode::kBov).first, base - 2 * K + 4);
  // svformer: only layer 0 keeps V.
  EXPECT_EQ(bytes(ValueMode::kSvformer).first, 6 * K + K);
  // resformer keeps everything.
  EXPECT_EQ(bytes(ValueMode::kResformerIdentity).first, base);
}

}  // namespace
}  // namespace vt
