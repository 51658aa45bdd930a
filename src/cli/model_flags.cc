// Model flags shared by `vtrain train` and `vtrain plan` (see model_flags.h). The --value and
// --block choices, their help and their options come from the registries (model/value_mode.h,
// model/block_shape_kind.h, model/model_options.h); only the sizes are typed here.
#include "cli/model_flags.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "model/block_shape.h"
#include "model/model_options.h"
#include "model/value_path.h"

namespace vt {

namespace {
std::vector<std::string> value_mode_names() {
  std::vector<std::string> names;
  for (ValueMode m : all_value_modes()) names.push_back(value_mode_name(m));
  return names;
}
std::vector<std::string> block_shape_names() {
  std::vector<std::string> names;
  for (BlockShapeKind s : all_block_shapes()) names.push_back(block_shape_name(s));
  return names;
}
// "  name                 help" rows under a title.
std::string choice_table(const char* title,
                         const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string out = absl::StrCat(title, ":\n");
  for (const auto& [name, help] : rows) {
    std::string left = "  " + name;
    left.resize(std::max<size_t>(left.size() + 2, 24), ' ');
    absl::StrAppend(&out, left, help, "\n");
  }
  return out;
}
}  // namespace

std::string model_choices_help() {
  std::vector<std::pair<std::string, std::string>> modes, shapes;
  for (ValueMode m : all_value_modes())
    modes.push_back({value_mode_name(m), value_path(m).help()});
  for (BlockShapeKind s : all_block_shapes())
    shapes.push_back({block_shape_name(s), block_shape(s).help()});
  return absl::StrCat(
      choice_table("Value modes (--value; docs/model.md \"Value paths\")", modes), "\n",
      choice_table("Block shapes (--block; docs/model.md \"Block shapes\")", shapes));
}

std::vector<FlagSpec> model_flag_specs() {
  std::vector<FlagSpec> out = {
      flag_heading("model"),
      choice_flag("preset", "tiny", {"tiny", "d12", "d24", "d32"},
                  "the model size; the flags below override it (their defaults are the preset's)"),
      no_default(config_field_flag("n_layer", 0, "transformer blocks")),
      no_default(config_field_flag("n_embd", 0, "model width d")),
      no_default(config_field_flag("n_head", 0, "query heads")),
      no_default(config_field_flag("n_kv_head", 0, "key/value heads (GQA; divides --heads)")),
      no_default(config_field_flag("head_dim", 0, "head size (even, for RoPE)")),
      no_default(config_field_flag("seq_len", 0, "tokens per row T")),
      no_default(config_field_flag("short_window", 0, "tokens an S layer of the window pattern sees")),
      text_flag("window-pattern", "", "the preset's unless given; e.g. SSSL, tiled over the layers (the last layer is L)"),
      choice_flag("window-keys", "w", {"w", "w+1"},
                  "keys a query of an S layer sees: w (ours) or w+1 (nanochat's flash-attention "
                  "window (w, 0); docs/model.md)"),
      choice_flag("smear-gate", "off", {"on", "off"},
                  "nanochat's smear gate: each position adds a gated share of the previous "
                  "position's embedding (docs/model.md)"),
      flag_heading("values"),
      text_flag("value", "baseline",
                absl::StrCat("the value path (modes below): ", absl::StrJoin(value_mode_names(), " "))),
      text_flag("value-layers", "default", "last-third|all|every-other|alternate|LIST of layers"),
  };
  for (const ModelOption& o : shared_value_options()) out.push_back(o.flag);
  for (const DeclaredOption& d : value_mode_options()) out.push_back(d.option.flag);
  out.push_back(flag_heading("blocks (docs/model.md)"));
  out.push_back(
      choice_flag("block", block_shape_name(ModelConfig{}.block), block_shape_names(), "the shape of every block (shapes below)"));
  for (const ModelOption& o : shared_block_options()) out.push_back(o.flag);
  for (const DeclaredOption& d : block_shape_options()) out.push_back(d.option.flag);
  for (const ModelOption& o : dense_options()) out.push_back(o.flag);
  return out;
}

absl::StatusOr<ModelConfig> model_config_from_flags(const Flags& f) {
  VT_ASSIGN_OR_RETURN(ModelConfig m, preset_config(f.get_string("preset")));
  auto set_int = [&](const char* name, int& field) {
    if (f.has(name)) field = static_cast<int>(f.get_int(name));
  };
  const bool dim_given = f.has("dim"), heads_given = f.has("heads");
  set_int("layers", m.n_layer);
  set_int("dim", m.n_embd);
  set_int("heads", m.n_head);
  if (!f.has("head-dim") && (dim_given || heads_given) && m.n_head > 0) {
    // keep d = H * hd when only one side is given
    if (m.n_head > m.n_embd || m.n_embd % m.n_head != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--heads ", m.n_head, m.n_head > m.n_embd ? " exceeds" : " does not divide", " --dim ",
          m.n_embd, dim_given ? "" : " (the preset's)",
          ": the head dimension is dim / heads, a whole number of at least 2 (or give --head-dim)"));
    m.head_dim = m.n_embd / m.n_head;
  }
  set_int("head-dim", m.head_dim);
  if (!f.has("kv-heads") && heads_given) m.n_kv_head = m.n_head;
  set_int("kv-heads", m.n_kv_head);
  set_int("seq-len", m.seq_len);
  set_int("window", m.short_window);
  if (f.has("window-pattern")) m.window_pattern = f.get_string("window-pattern");
  m.window_keys = f.get_string("window-keys");
  m.smear_gate = f.get_string("smear-gate") == "on";
  VT_ASSIGN_OR_RETURN(m.value_mode, parse_value_mode(f.get_string("value")));
  m.value_layers = f.get_string("value-layers");
  VT_ASSIGN_OR_RETURN(m.block, parse_block_shape(f.get_string("block")));
  VT_RETURN_IF_ERROR(apply_model_options(f, m));
  return m;
}

namespace {

using FlagValues = std::vector<std::pair<std::string, nlohmann::json>>;

// ModelConfig built from `preset` and `values` as model_config_from_flags builds it, with cfg's
// vocabulary and reparam seed, finalized.
absl::StatusOr<ModelConfig> rebuild(const std::string& preset, const FlagValues& values,
                                    const ModelConfig& like) {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "model flags";
    c.flags = model_flag_specs();
    return c;
  }();
  std::vector<std::string> args = {"--preset", preset};
  for (const auto& [name, v] : values) {
    if (v.is_boolean()) {
      if (v.get<bool>()) args.push_back("--" + name);
      continue;
    }
    args.push_back("--" + name);
    args.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  }
  VT_ASSIGN_OR_RETURN(Flags f, Flags::parse(spec, args));
  VT_ASSIGN_OR_RETURN(ModelConfig m, model_config_from_flags(f));
  m.vocab_size = like.vocab_size;
  m.reparam_seed = like.reparam_seed;
  VT_RETURN_IF_ERROR(m.finalize());
  return m;
}

}  // namespace

absl::StatusOr<FlagValues> model_flags_of(const ModelConfig& cfg) {
  const nlohmann::json want = cfg.to_json();
  auto on_off = [](bool b) { return nlohmann::json(b ? "on" : "off"); };
  const FlagValues core = {
      {"layers", cfg.n_layer},        {"dim", cfg.n_embd},
      {"heads", cfg.n_head},          {"kv-heads", cfg.n_kv_head},
      {"head-dim", cfg.head_dim},     {"seq-len", cfg.seq_len},
      {"window", cfg.effective_short_window()}, {"window-pattern", cfg.window_pattern},
      {"window-keys", cfg.window_keys}, {"smear-gate", on_off(cfg.smear_gate)},
      {"value", value_mode_name(cfg.value_mode)}, {"value-layers", cfg.value_layers},
      {"block", block_shape_name(cfg.block)}};
  // The options: the config fields each sets, and its value for cfg.
  struct Option {
    std::vector<const char*> fields;
    const char* flag;
    nlohmann::json value;
  };
  const std::vector<Option> options = {
      {{"detach_v1"}, "detach-v1", cfg.detach_v1},
      {{"shared_table"}, "shared-table", cfg.shared_table},
      {{"bov_add_fixed"}, "bov-add-fixed", cfg.bov_add_fixed},
      {{"value_coef_fixed", "value_coef"}, "value-coef",
       cfg.value_coef_fixed ? nlohmann::json(cfg.value_coef).dump() : "learnable"},
      {{"plus_init"}, "plus-init", cfg.plus_init},
      {{"plus_scale"}, "plus-scale", cfg.plus_scale},
      {{"neutreno_lambda"}, "neutreno-lambda", cfg.neutreno_lambda},
      {{"qk_norm"}, "qk-norm", on_off(cfg.use_qk_norm())},
      {{"mlp_act"}, "mlp-act", cfg.mlp_act},
      {{"norm_none"}, "norm", cfg.norm_none ? "none" : "rms"},
      {{"reparam_init"}, "reparam-init", cfg.reparam_init},
      {{"proj_gains"}, "proj-gains", on_off(cfg.proj_gains)},
      {{"attn_bias"}, "attn-bias", cfg.attn_bias},
      {{"spa_schedule"}, "spa-schedule", cfg.spa_schedule},
      {{"spa_rescale"}, "spa-rescale", cfg.spa_rescale},
      {{"spa_centre"}, "spa-centre", cfg.spa_centre},
      {{"dense"}, "dense", cfg.dense},
      {{"dense_dilation"}, "dense-dilation", cfg.dense_dilation},
      {{"dense_period"}, "dense-period", cfg.dense_period},
  };
  std::string differs;
  for (const char* preset : {"tiny", "d12", "d24", "d32"}) {
    absl::StatusOr<ModelConfig> base = rebuild(preset, core, cfg);
    if (!base.ok()) {
      differs = std::string(base.status().message());
      continue;
    }
    const nlohmann::json got = base->to_json();
    FlagValues values = core;
    for (const Option& o : options) {
      bool same = true;
      for (const char* field : o.fields) same = same && got[field] == want[field];
      if (!same) values.push_back({o.flag, o.value});
    }
    absl::StatusOr<ModelConfig> full = rebuild(preset, values, cfg);
    if (!full.ok()) {
      differs = std::string(full.status().message());
      continue;
    }
    const nlohmann::json again = full->to_json();
    if (again == want) {
      values.insert(values.begin(), {"preset", preset});
      return values;
    }
    differs.clear();
    for (const auto& [field, v] : want.items())
      if (!again.contains(field) || again[field] != v)
        absl::StrAppend(&differs, differs.empty() ? "" : ", ", field, " ", v.dump(), " (flags give ",
                        again.contains(field) ? again[field].dump() : "none", ")");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the model config cannot be written as flags of vtrain train: ", differs));
}

}  // namespace vt
