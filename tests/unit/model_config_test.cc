// ModelConfig: presets match the sizes of docs/model.md "Base transformer", target-layer specs
// resolve as documented, and bad configs are refused with messages that name the problem.
#include <gtest/gtest.h>

#include "core/arena.h"
#include "model/config.h"
#include "model/gpt.h"
#include "cli/model_flags.h"

namespace vt {
namespace {

ModelConfig small(ValueMode mode, const std::string& layers = "default", int L = 6) {
  ModelConfig c;
  c.n_layer = L;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.vocab_size = 100;
  c.seq_len = 16;
  c.value_mode = mode;
  c.value_layers = layers;
  return c;
}

std::string error_of(ModelConfig c) {
  absl::Status st = c.finalize();
  return st.ok() ? "" : std::string(st.message());
}

TEST(ModelConfig, PresetsHaveThePaperSizes) {
  struct Case {
    const char* name;
    int L, d, H;
    double blocks, total;  // parameters (millions)
  } cases[] = {{"d12", 12, 768, 6, 84.9, 135.2},
               {"d24", 24, 1536, 12, 679.5, 780.1},
               {"d32", 32, 2048, 16, 1610.6, 1744.8}};
  for (const auto& cs : cases) {
    auto c = preset_config(cs.name);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c->finalize().ok());
    EXPECT_EQ(c->n_layer, cs.L);
    EXPECT_EQ(c->n_embd, cs.d);
    EXPECT_EQ(c->n_head, cs.H);
    EXPECT_EQ(c->head_dim, 128);
    ParamStore store;  // registration only: nothing is allocated before finalize()
    GPT model(*c);
    model.register_params(store);
    double total = 0, blocks = 0;
    for (const auto& p : store.infos()) {
      total += p.numel();
      if (p.name.rfind("blocks.", 0) == 0) blocks += p.numel();
    }
    EXPECT_NEAR(blocks / 1e6, cs.blocks, 0.1) << cs.name;
    EXPECT_NEAR(total / 1e6, cs.total, 0.1) << cs.name;
  }
  EXPECT_FALSE(preset_config("d13").ok());
}

TEST(ModelConfig, WindowsFollowThePattern) {
  ModelConfig c = small(ValueMode::kBaseline);
  c.seq_len = 2048;
  ASSERT_TRUE(c.finalize().ok());
  EXPECT_EQ(c.effective_short_window(), 512);
  // SSSL tiled over 6 layers: S S S L S L(last forced L)
  EXPECT_EQ(c.layer_window(0), 512);
  EXPECT_EQ(c.layer_window(2), 512);
  EXPECT_EQ(c.layer_window(3), 2048);
  EXPECT_EQ(c.layer_window(4), 512);
  EXPECT_EQ(c.layer_window(5), 2048);
  // --window-keys w+1: nanochat's (W, 0) window, one key more on S layers only, never past T.
  c.window_keys = "w+1";
  ASSERT_TRUE(c.finalize().ok());
  EXPECT_EQ(c.layer_window(0), 513);
  EXPECT_EQ(c.layer_window(3), 2048);
  EXPECT_EQ(c.layer_window(5), 2048);
  c.short_window = 2048;
  ASSERT_TRUE(c.finalize().ok());
  EXPECT_EQ(c.layer_window(0), 2048);
  c.window_keys = "w+2";
  EXPECT_NE(c.finalize().message().find("--window-keys 'w+2' must be w or w+1"), std::string::npos);
}

TEST(ModelConfig, TargetSpecs) {
  auto t = [](ValueMode m, const std::string& s, int L) {
    auto r = resolve_target_layers(m, s, L);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<int>{};
  };
  EXPECT_EQ(t(ValueMode::kBov, "default", 6), (std::vector<int>{4, 5}));
  EXPECT_EQ(t(ValueMode::kBov, "default", 12), (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(t(ValueMode::kResformerIdentity, "default", 4), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t(ValueMode::kValueEmbed, "default", 6), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(t(ValueMode::kValueEmbed, "default", 5), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(t(ValueMode::kX0v, "all", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t(ValueMode::kV1, "all", 3), (std::vector<int>{1, 2}));
  EXPECT_EQ(t(ValueMode::kV1, "every-other", 6), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(t(ValueMode::kV1, "4,2", 6), (std::vector<int>{2, 4}));
  EXPECT_TRUE(t(ValueMode::kBaseline, "default", 6).empty());
}

TEST(ModelConfig, BadConfigsNameTheProblem) {
  ModelConfig c = small(ValueMode::kBaseline);
  c.n_head = 3;  // 3 * 16 != 64
  EXPECT_NE(error_of(c).find("does not equal --dim"), std::string::npos) << error_of(c);
  c = small(ValueMode::kBaseline);
  c.n_kv_head = 3;
  EXPECT_NE(error_of(c).find("must divide --heads"), std::string::npos) << error_of(c);
  c = small(ValueMode::kV1, "2,9");
  EXPECT_NE(error_of(c).find("layer 9 is out of range"), std::string::npos) << error_of(c);
  c = small(ValueMode::kV1, "0,2");
  EXPECT_NE(error_of(c).find("layer 0 cannot be a target"), std::string::npos) << error_of(c);
  c = small(ValueMode::kV1, "two");
  EXPECT_NE(error_of(c).find("comma-separated list"), std::string::npos) << error_of(c);
  c = small(ValueMode::kBaseline);
  c.window_pattern = "SSX";
  EXPECT_NE(error_of(c).find("string of S and L"), std::string::npos) << error_of(c);
  c = small(ValueMode::kBaseline);
  c.shared_table = true;
  EXPECT_NE(error_of(c).find("only to value mode 'bov'"), std::string::npos) << error_of(c);
  auto m = parse_value_mode("resformer");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown value mode 'resformer'"), std::string::npos);
  EXPECT_NE(m.status().message().find("value-embed"), std::string::npos);
}

TEST(ModelConfig, JsonRoundTrip) {
  ModelConfig c = small(ValueMode::kResformerSparse, "3,5");
  c.detach_v1 = true;
  ASSERT_TRUE(c.finalize().ok());
  auto back = ModelConfig::from_json(c.to_json());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->to_json(), c.to_json());
  EXPECT_EQ(back->target_layers, (std::vector<int>{3, 5}));
  // The nanochat fields round-trip; a config written before them (a checkpoint) reads as the
  // defaults.
  c.window_keys = "w+1";
  c.smear_gate = true;
  ASSERT_TRUE(c.finalize().ok());
  auto with = ModelConfig::from_json(c.to_json());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->window_keys, "w+1");
  EXPECT_TRUE(with->smear_gate);
  nlohmann::json old = c.to_json();
  old.erase("window_keys");
  old.erase("smear_gate");
  auto before = ModelConfig::from_json(old);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->window_keys, "w");
  EXPECT_FALSE(before->smear_gate);
  old["window_keys"] = "w+3";
  EXPECT_FALSE(ModelConfig::from_json(old).ok());
}

// The value-mode options round-trip; a resformer-plus config written before --plus-init and
// --plus-scale existed reads as the model vtrain trained then (BlaGPT's logits, fixed scale L),
// so such a checkpoint loads for eval and generate, and resuming it under the new defaults is
// refused naming plus_init and value_plus.scale (checkpoint_test).
TEST(ModelConfig, ValueOptionsInJson) {
  ModelConfig v1 = small(ValueMode::kV1, "all");
  v1.value_coef_fixed = true;
  v1.value_coef = 1.5;
  ASSERT_TRUE(v1.finalize().ok());
  auto back = ModelConfig::from_json(v1.to_json());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->value_coef_fixed);
  EXPECT_EQ(back->value_coef, 1.5);
  ModelConfig plus = small(ValueMode::kResformerPlus, "default");
  ASSERT_TRUE(plus.finalize().ok());
  nlohmann::json j = plus.to_json();
  EXPECT_EQ(j["plus_init"], "paper");
  EXPECT_EQ(j["plus_scale"], "learnable");
  auto now = ModelConfig::from_json(j);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->to_json(), j);
  for (const char* k : {"plus_init", "plus_scale", "value_coef", "value_coef_fixed"}) j.erase(k);
  auto old = ModelConfig::from_json(j);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->plus_init, "blagpt");
  EXPECT_EQ(old->plus_scale, "fixed");
  j["plus_init"] = "zeros";
  EXPECT_NE(ModelConfig::from_json(j).status().message().find("--plus-init 'zeros'"),
            std::string::npos);
}

// --spa-rescale / --spa-centre: on and bias by default with --attn-bias, "" without (and refused
// there); an --attn-bias config written before they existed reads as what vtrain trained then
// (no rescaling, the uniform centring matrix).
TEST(ModelConfig, SpaRescaleAndCentreInJson) {
  ModelConfig c = small(ValueMode::kBaseline);
  c.block = BlockShapeKind::kSas;
  c.n_kv_head = c.n_head;
  c.attn_bias = "espa";
  ASSERT_TRUE(c.finalize().ok());
  EXPECT_EQ(c.spa_rescale, "on");
  EXPECT_EQ(c.spa_centre, "bias");
  nlohmann::json j = c.to_json();
  auto back = ModelConfig::from_json(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->to_json(), j);
  j.erase("spa_rescale");
  j.erase("spa_centre");
  auto old = ModelConfig::from_json(j);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->spa_rescale, "off");
  EXPECT_EQ(old->spa_centre, "uniform");
  j["spa_centre"] = "mean";
  EXPECT_NE(ModelConfig::from_json(j).status().message().find("--spa-centre 'mean'"),
            std::string::npos);
  ModelConfig plain = small(ValueMode::kBaseline);
  ASSERT_TRUE(plain.finalize().ok());
  EXPECT_EQ(plain.spa_rescale, "");
  plain.spa_rescale = "on";
  const std::string e = std::string(plain.finalize().message());
  EXPECT_NE(e.find("--spa-rescale"), std::string::npos) << e;
  EXPECT_NE(e.find("--attn-bias"), std::string::npos) << e;
}

// One table of ranges: every model flag with a range takes it from config_field_ranges().
TEST(ModelConfig, FlagsAndConfigsShareTheDeclaredRanges) {
  int matched = 0;
  for (const FlagSpec& f : model_flag_specs()) {
    if (f.type != FlagType::kInt && f.type != FlagType::kNumber) continue;
    bool found = false;
    for (const ConfigFieldRange& r : config_field_ranges())
      if (f.name == r.flag) {
        EXPECT_EQ(f.lo, r.lo) << f.name;
        EXPECT_EQ(f.hi, r.hi) << f.name;
        EXPECT_EQ(f.type == FlagType::kInt, r.integer) << f.name;
        found = true;
        ++matched;
      }
    EXPECT_TRUE(found) << "--" << f.name << " has a range outside config_field_ranges()";
  }
  EXPECT_GE(matched, 10);
}

// A config from JSON (a checkpoint's attribute) is held to those ranges field by field.
TEST(ModelConfig, JsonFieldsOutsideTheirRangesAreRefused) {
  ModelConfig c = small(ValueMode::kBaseline);
  ASSERT_TRUE(c.finalize().ok());
  auto refused = [&](const char* field, const nlohmann::json& v) {
    nlohmann::json j = c.to_json();
    if (v.is_discarded()) j.erase(field);
    else j[field] = v;
    auto r = ModelConfig::from_json(j);
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_EQ(refused("norm_eps", -1.0), "norm_eps -1 is out of range: expected a number in [1e-12, 1]");
  EXPECT_EQ(refused("n_layer", 2.5),
            "n_layer 2.5 is not an integer: expected an integer in [1, 4096] (the range of --layers)");
  EXPECT_EQ(refused("n_layer", 1e9),
            "n_layer 1000000000 is out of range: expected an integer in [1, 4096] (the range of --layers)");
  EXPECT_EQ(refused("n_layer", "2"), "field n_layer is string \"2\"; expected an integer in [1, 4096]");
  EXPECT_EQ(refused("n_layer", nlohmann::json(nlohmann::json::value_t::discarded)), "field n_layer is missing");
  EXPECT_EQ(refused("detach_v1", 1), "field detach_v1 is number 1; expected true or false");
  EXPECT_NE(refused("logit_softcap", 0.0).find("logit_softcap 0 is out of range"), std::string::npos);
  EXPECT_NE(refused("mlp_ratio", 1e9).find("mlp_ratio 1000000000 is out of range"), std::string::npos);
  EXPECT_NE(refused("rope_base", 0.0).find("rope_base 0 is out of range"), std::string::npos);
  EXPECT_NE(refused("seq_len", 2e9).find("(the range of --seq-len)"), std::string::npos);
  EXPECT_EQ(refused("n_layer", 2.0), "");  // a whole number written as a float is an integer
  EXPECT_NE(ModelConfig::from_json(nlohmann::json::array()).status().message().find("not an object"),
            std::string::npos);
  // In every range, too many parameters together.
  nlohmann::json j = c.to_json();
  j["n_layer"] = 4096, j["n_embd"] = 1 << 20, j["n_head"] = 8192, j["n_kv_head"] = 8192, j["head_dim"] = 128;
  auto big = ModelConfig::from_json(j);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("above vtrain's limit of 1099511627776 (2^40)"), std::string::npos)
      << big.status();
}

}  // namespace
}  // namespace vt
