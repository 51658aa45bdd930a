// cli/model_flags and model/model_options: the --value / --block choices, their help and the
// options each mode or shape declares come from the registries, set the config, and are refused
// with a mode that does not declare them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/model_flags.h"
#include "model/block_shape.h"
#include "model/model_options.h"
#include "model/value_path.h"

namespace vt {
namespace {

CommandSpec model_command() {
  CommandSpec c;
  c.name = "model_flags_test";
  c.flags = model_flag_specs();
  return c;
}

// The config the model flags `args` give, or the error message.
absl::StatusOr<ModelConfig> config_of(const std::vector<std::string>& args) {
  static const CommandSpec spec = model_command();
  VT_ASSIGN_OR_RETURN(Flags f, Flags::parse(spec, args));
  return model_config_from_flags(f);
}

std::string error_of(const std::vector<std::string>& args) {
  auto c = config_of(args);
  return c.ok() ? "" : std::string(c.status().message());
}

// The message of ModelConfig::finalize on the flags' config ("" when it passes).
std::string finalize_error(const std::vector<std::string>& args) {
  auto c = config_of(args);
  if (!c.ok()) return "flags refused: " + std::string(c.status().message());
  return std::string(c->finalize().message());
}

const FlagSpec& flag(const std::string& name) {
  static const std::vector<FlagSpec> specs = model_flag_specs();
  for (const FlagSpec& f : specs)
    if (f.name == name) return f;
  ADD_FAILURE() << "no flag --" << name;
  return specs.front();
}

TEST(ModelFlags, ChoicesAndHelpComeFromTheRegistries) {
  std::vector<std::string> shapes;
  for (BlockShapeKind s : all_block_shapes()) shapes.push_back(block_shape_name(s));
  EXPECT_EQ(flag("block").choices, shapes);
  const std::string table = model_choices_help();
  for (ValueMode m : all_value_modes()) {
    EXPECT_NE(flag("value").help.find(value_mode_name(m)), std::string::npos) << value_mode_name(m);
    EXPECT_NE(table.find(value_path(m).help()), std::string::npos) << value_mode_name(m);
  }
  for (BlockShapeKind s : all_block_shapes())
    EXPECT_NE(table.find(block_shape(s).help()), std::string::npos) << block_shape_name(s);
  // Every option a mode or shape declares is a model flag, once.
  for (const auto& options : {value_mode_options(), block_shape_options()})
    for (const DeclaredOption& d : options) {
      const std::vector<FlagSpec> specs = model_flag_specs();
      EXPECT_EQ(std::count_if(specs.begin(), specs.end(),
                              [&](const FlagSpec& f) { return f.name == d.option.flag.name; }),
                1)
          << d.option.flag.name;
    }
}

TEST(ModelFlags, OptionsDeclaredByTheirModesAndShapes) {
  auto owners = [](const std::vector<DeclaredOption>& options, const std::string& name) {
    for (const DeclaredOption& d : options)
      if (d.option.flag.name == name) return d.owners;
    return std::vector<std::string>{};
  };
  EXPECT_EQ(owners(value_mode_options(), "shared-table"), std::vector<std::string>{"bov"});
  EXPECT_EQ(owners(value_mode_options(), "bov-add-fixed"), std::vector<std::string>{"bov-add"});
  EXPECT_EQ(owners(value_mode_options(), "neutreno-lambda"),
            std::vector<std::string>{"neutreno"});
  EXPECT_EQ(owners(value_mode_options(), "value-coef"), (std::vector<std::string>{"v1", "x0v"}));
  for (const char* name : {"plus-init", "plus-scale"})
    EXPECT_EQ(owners(value_mode_options(), name), std::vector<std::string>{"resformer-plus"})
        << name;
  for (const char* name : {"norm", "reparam-init", "proj-gains", "spa-schedule", "spa-rescale",
                           "spa-centre", "attn-bias"})
    EXPECT_EQ(owners(block_shape_options(), name), (std::vector<std::string>{"sas", "sas-p"}))
        << name;
}

TEST(ModelFlags, OptionsSetTheConfig) {
  auto bov = config_of({"--value", "bov", "--shared-table"});
  ASSERT_TRUE(bov.ok()) << bov.status();
  EXPECT_EQ(bov->value_mode, ValueMode::kBov);
  EXPECT_TRUE(bov->shared_table);
  auto neu = config_of({"--value", "neutreno", "--neutreno-lambda", "0.25", "--detach-v1"});
  ASSERT_TRUE(neu.ok()) << neu.status();
  EXPECT_EQ(neu->neutreno_lambda, 0.25);
  EXPECT_TRUE(neu->detach_v1);
  auto sas = config_of({"--block", "sas-p", "--norm", "none", "--reparam-init", "orth",
                        "--attn-bias", "uspa", "--qk-norm", "on", "--dense", "--dense-period", "2"});
  ASSERT_TRUE(sas.ok()) << sas.status();
  EXPECT_EQ(sas->block, BlockShapeKind::kSasP);
  EXPECT_TRUE(sas->norm_none);
  EXPECT_EQ(sas->reparam_init, "orth");
  EXPECT_EQ(sas->attn_bias, "uspa");
  EXPECT_EQ(sas->qk_norm, 1);
  EXPECT_TRUE(sas->dense);
  EXPECT_EQ(sas->dense_period, 2);
  auto v1 = config_of({"--value", "v1", "--value-layers", "all", "--value-coef", "1"});
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_TRUE(v1->value_coef_fixed);
  EXPECT_EQ(v1->value_coef, 1.0);
  auto x0v = config_of({"--value", "x0v", "--value-coef", "-0.5"});
  ASSERT_TRUE(x0v.ok()) << x0v.status();
  EXPECT_TRUE(x0v->value_coef_fixed);
  EXPECT_EQ(x0v->value_coef, -0.5);
  auto x0l = config_of({"--value", "x0v", "--value-coef", "learnable"});
  ASSERT_TRUE(x0l.ok()) << x0l.status();
  EXPECT_FALSE(x0l->value_coef_fixed);
  auto plus = config_of({"--value", "resformer-plus"});
  ASSERT_TRUE(plus.ok()) << plus.status();
  ASSERT_TRUE(plus->finalize().ok());
  EXPECT_EQ(plus->plus_init, "paper");  // the paper's method is the default
  EXPECT_EQ(plus->plus_scale, "learnable");
  auto bla = config_of({"--value", "resformer-plus", "--plus-init", "blagpt", "--plus-scale",
                        "fixed"});
  ASSERT_TRUE(bla.ok()) << bla.status();
  EXPECT_EQ(bla->plus_init, "blagpt");
  EXPECT_EQ(bla->plus_scale, "fixed");
  auto plain = config_of({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->value_coef_fixed);
  EXPECT_EQ(plain->plus_init, "");
  EXPECT_FALSE(plain->shared_table || plain->bov_add_fixed || plain->norm_none || plain->dense);
  EXPECT_EQ(plain->neutreno_lambda, 0.4);
  EXPECT_EQ(plain->qk_norm, -1);
}

TEST(ModelFlags, ProjGainsIsASimplifiedShapeOption) {
  // Shape options are checked against the shape when the config is finalized.
  auto error_of = [](const std::vector<std::string>& args) {
    auto c = config_of(args);
    if (!c.ok()) return std::string(c.status().message());
    const absl::Status s = c->finalize();
    return std::string(s.message());
  };
  auto on = config_of({"--block", "sas", "--proj-gains", "on"});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->proj_gains);
  auto off = config_of({"--block", "sas-p"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->proj_gains);
  for (const char* shape : {"prenorm", "vskipinit"}) {
    const std::string e = error_of({"--block", shape, "--proj-gains", "on"});
    EXPECT_NE(e.find("--proj-gains"), std::string::npos) << e;
    EXPECT_NE(e.find(shape), std::string::npos) << e;
  }
  const std::string both = error_of({"--block", "sas", "--proj-gains", "on", "--reparam-init", "id"});
  EXPECT_NE(both.find("--proj-gains"), std::string::npos) << both;
  EXPECT_NE(both.find("--reparam-init"), std::string::npos) << both;
  EXPECT_NE(error_of({"--block", "sas", "--proj-gains", "maybe"}).find("proj-gains"),
            std::string::npos);
}

TEST(ModelFlags, SpaRescaleAndCentreNeedAnAttnBias) {
  auto def = config_of({"--block", "sas", "--attn-bias", "espa"});
  ASSERT_TRUE(def.ok()) << def.status();
  ASSERT_TRUE(def->finalize().ok());
  EXPECT_EQ(def->spa_rescale, "on");
  EXPECT_EQ(def->spa_centre, "bias");
  auto old = config_of({"--block", "sas-p", "--attn-bias", "uspa", "--window-pattern", "L",
                        "--spa-rescale", "off", "--spa-centre", "uniform"});
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_TRUE(old->finalize().ok());
  EXPECT_EQ(old->spa_rescale, "off");
  EXPECT_EQ(old->spa_centre, "uniform");
  for (const char* flag : {"--spa-rescale", "--spa-centre"}) {
    const std::string e =
        finalize_error({"--block", "sas", flag, std::string(flag) == "--spa-rescale" ? "on" : "bias"});
    EXPECT_NE(e.find(flag), std::string::npos) << e;
    EXPECT_NE(e.find("--attn-bias"), std::string::npos) << e;
  }
}

TEST(ModelFlags, AModeOptionWithAnotherModeIsRefused) {
  EXPECT_EQ(error_of({"--value", "bov", "--neutreno-lambda", "0.5"}),
            "--neutreno-lambda applies only to --value neutreno");
  EXPECT_EQ(error_of({"--shared-table"}), "--shared-table applies only to --value bov");
  EXPECT_EQ(error_of({"--value", "bov", "--bov-add-fixed"}),
            "--bov-add-fixed applies only to --value bov-add");
  EXPECT_EQ(error_of({"--value", "bov", "--value-coef", "1"}),
            "--value-coef applies only to --value v1 or --value x0v");
  EXPECT_EQ(error_of({"--value", "v1", "--plus-init", "paper"}),
            "--plus-init applies only to --value resformer-plus");
  EXPECT_EQ(error_of({"--value", "resformer-learnable", "--plus-scale", "fixed"}),
            "--plus-scale applies only to --value resformer-plus");
  EXPECT_EQ(finalize_error({"--value", "v1", "--value-coef", "big"}),
            "--value-coef must be 'learnable' or a number in [-1000, 1000] (got something else)");
  EXPECT_EQ(finalize_error({"--value", "x0v", "--value-coef", "5000"}),
            "--value-coef must be 'learnable' or a number in [-1000, 1000] (got 5000)");
  EXPECT_NE(error_of({"--value", "resformer-plus", "--plus-init", "zeros"}).find("plus-init"),
            std::string::npos);
  EXPECT_EQ(error_of({"--dense-period", "2"}),
            "--dense-dilation and --dense-period need --dense");
  // A config read from JSON is held to the same rule by finalize (model_config_test too).
  ModelConfig c = *config_of({"--value", "baseline"});
  c.bov_add_fixed = true;
  c.vocab_size = 100;
  EXPECT_EQ(c.finalize().message(), "--bov-add-fixed applies only to value mode 'bov-add'");
  c.bov_add_fixed = false;
  c.value_coef_fixed = true;
  EXPECT_EQ(c.finalize().message(), "--value-coef applies only to value mode 'v1' or 'x0v'");
  c.value_coef_fixed = false;
  c.plus_init = "paper";
  EXPECT_EQ(c.finalize().message(), "--plus-init applies only to value mode 'resformer-plus'");
}

}  // namespace
}  // namespace vt
