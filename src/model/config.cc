// ModelConfig's declared field ranges, presets, windows and JSON. The members that consult the
// value-mode and block-shape registries or GPT (finalize, param_count, target layers) are
// config_rules.cc's.
#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "absl/strings/str_format.h"

namespace vt {

namespace {
absl::Status bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string bound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrFormat("%g", v);
}
}  // namespace

const std::vector<ConfigFieldRange>& config_field_ranges() {
  // Fields without a flag get ranges that keep every kernel finite: a positive epsilon, a RoPE
  // base above 1, a soft cap of at least 1 (0 would divide by zero), an MLP ratio that keeps the
  // hidden width an int.
  static const std::vector<ConfigFieldRange> kRanges = {
      {"n_layer", "layers", 1, 4096, true},
      {"n_embd", "dim", 1, 1 << 20, true},
      {"n_head", "heads", 1, 65536, true},
      {"n_kv_head", "kv-heads", 1, 65536, true},
      {"head_dim", "head-dim", 2, 4096, true},
      {"vocab_size", "", 2, 1 << 30, true},
      {"seq_len", "seq-len", 2, 1 << 24, true},
      {"short_window", "window", 1, 1 << 24, true},
      {"rope_base", "", 1.0, 1e12, false},
      {"norm_eps", "", 1e-12, 1.0, false},
      {"qk_norm_scale", "", 0.0, 1e3, false},
      {"logit_softcap", "", 1.0, 1e4, false},
      {"mlp_ratio", "", 1, 64, true},
      {"dense_dilation", "dense-dilation", 1, 4096, true},
      {"dense_period", "dense-period", 1, 4096, true},
      {"neutreno_lambda", "neutreno-lambda", 0, 10, false},
      {"value_coef", "value-coef", -1000, 1000, false},
      {"value_embed_gate_channels", "", 1, 1 << 20, true},
      {"value_embed_gate_scale", "", 0, 1e3, false},
  };
  return kRanges;
}

const ConfigFieldRange& config_field_range(const std::string& field) {
  for (const ConfigFieldRange& r : config_field_ranges())
    if (field == r.field) return r;
  VT_CHECK_MSG(false, "no declared range for config field " << field);
  return config_field_ranges()[0];
}

std::string config_range_problem(const ConfigFieldRange& r, double value) {
  const bool in_range = std::isfinite(value) && value >= r.lo && value <= r.hi;
  const bool integral = !r.integer || (std::isfinite(value) && value == std::floor(value));
  if (in_range && integral) return "";
  return absl::StrCat(r.field, " ", absl::StrFormat("%.17g", value), " is ",
                      integral ? "out of range" : "not an integer", ": expected ",
                      r.integer ? "an integer" : "a number", " in [", bound(r.lo), ", ",
                      bound(r.hi), "]",
                      *r.flag ? absl::StrCat(" (the range of --", r.flag, ")") : std::string());
}

FlagSpec config_field_flag(const char* field, double def, const std::string& help) {
  const ConfigFieldRange& r = config_field_range(field);
  return r.integer ? int_flag(r.flag, static_cast<int64_t>(def), r.lo, r.hi, help)
                   : num_flag(r.flag, def, r.lo, r.hi, help);
}

int ModelConfig::effective_short_window() const {
  if (short_window > 0) return short_window;
  // ceil(T/4/128)*128
  int w = ((seq_len + 3) / 4 + 127) / 128 * 128;
  return w;
}

int ModelConfig::layer_window(int layer) const {
  if (layer == n_layer - 1) return seq_len;
  char c = window_pattern[layer % window_pattern.size()];
  if (c == 'L') return seq_len;
  const int extra = window_keys == "w+1" ? 1 : 0;  // nanochat's (W, 0) window: W + 1 keys
  return std::min(effective_short_window() + extra, seq_len);
}

bool ModelConfig::is_target(int layer) const { return target_index(layer) >= 0; }

int ModelConfig::target_index(int layer) const {
  auto it = std::find(target_layers.begin(), target_layers.end(), layer);
  return it == target_layers.end() ? -1 : static_cast<int>(it - target_layers.begin());
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  j["n_layer"] = n_layer;
  j["n_embd"] = n_embd;
  j["n_head"] = n_head;
  j["n_kv_head"] = n_kv_head;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["vocab_padded"] = vocab_padded;
  j["seq_len"] = seq_len;
  j["window_pattern"] = window_pattern;
  j["short_window"] = effective_short_window();
  j["rope_base"] = rope_base;
  j["norm_eps"] = norm_eps;
  j["qk_norm_scale"] = qk_norm_scale;
  j["logit_softcap"] = logit_softcap;
  j["mlp_ratio"] = mlp_ratio;
  j["block"] = block_shape_name(block);
  j["norm_none"] = norm_none;
  j["qk_norm"] = use_qk_norm();
  j["reparam_init"] = reparam_init;
  j["reparam_seed"] = reparam_seed;
  j["attn_bias"] = attn_bias;
  j["spa_schedule"] = spa_schedule;
  j["spa_rescale"] = spa_rescale;
  j["spa_centre"] = spa_centre;
  j["proj_gains"] = proj_gains;
  j["mlp_act"] = mlp_act;
  j["dense"] = dense;
  j["dense_dilation"] = dense_dilation;
  j["dense_period"] = dense_period;
  j["neutreno_lambda"] = neutreno_lambda;
  j["value_mode"] = value_mode_name(value_mode);
  j["value_layers"] = value_layers;
  j["target_layers"] = target_layers;
  j["detach_v1"] = detach_v1;
  j["shared_table"] = shared_table;
  j["bov_add_fixed"] = bov_add_fixed;
  j["value_coef_fixed"] = value_coef_fixed;
  j["value_coef"] = value_coef;
  j["plus_init"] = plus_init;
  j["plus_scale"] = plus_scale;
  j["value_embed_gate_channels"] = value_embed_gate_channels;
  j["value_embed_gate_scale"] = value_embed_gate_scale;
  j["window_keys"] = window_keys;
  j["smear_gate"] = smear_gate;
  return j;
}

namespace {

// Field readers of from_json: each names the field and what it must be.
class JsonFields {
 public:
  explicit JsonFields(const nlohmann::json& j) : j_(j) {}
  const absl::Status& status() const { return st_; }

  // The field, or null when it is absent (an error unless optional) or an error came before.
  const nlohmann::json* lookup(const char* field, bool optional) {
    if (!st_.ok()) return nullptr;
    auto it = j_.find(field);
    if (it != j_.end()) return &*it;
    if (!optional) st_ = bad(absl::StrCat("field ", field, " is missing"));
    return nullptr;
  }
  // A declared-range number (config_field_ranges); left as it is when absent and optional.
  template <typename T>
  void number(const char* field, T& out, bool optional = false) {
    const ConfigFieldRange& r = config_field_range(field);
    const nlohmann::json* it = lookup(field, optional);
    if (it == nullptr) return;
    if (!it->is_number() || it->is_boolean()) {
      st_ = bad(absl::StrCat("field ", field, " is ", it->type_name(), " ", clip(it->dump()),
                             "; expected ", r.integer ? "an integer" : "a number", " in [",
                             bound(r.lo), ", ", bound(r.hi), "]"));
      return;
    }
    const double v = it->get<double>();
    if (std::string p = config_range_problem(r, v); !p.empty()) {
      st_ = bad(p);
      return;
    }
    out = static_cast<T>(v);
  }
  void boolean(const char* field, bool& out, bool optional) {
    const nlohmann::json* it = lookup(field, optional);
    if (it == nullptr) return;
    if (!it->is_boolean()) {
      st_ = bad(absl::StrCat("field ", field, " is ", it->type_name(), " ", clip(it->dump()),
                             "; expected true or false"));
      return;
    }
    out = it->get<bool>();
  }
  void text(const char* field, std::string& out, bool optional, size_t max_len = 4096) {
    const nlohmann::json* it = lookup(field, optional);
    if (it == nullptr) return;
    if (!it->is_string()) {
      st_ = bad(absl::StrCat("field ", field, " is ", it->type_name(), " ", clip(it->dump()),
                             "; expected a string"));
      return;
    }
    const std::string& v = it->get_ref<const std::string&>();
    if (v.size() > max_len) {
      st_ = bad(absl::StrCat("field ", field, " is ", v.size(), " characters long; at most ",
                             max_len));
      return;
    }
    out = v;
  }
  void seed(const char* field, uint64_t& out) {
    if (!st_.ok()) return;
    auto it = j_.find(field);
    if (it == j_.end()) return;
    if (!it->is_number_unsigned()) {
      st_ = bad(absl::StrCat("field ", field, " is ", clip(it->dump()),
                             "; expected an integer in [0, 2^64)"));
      return;
    }
    out = it->get<uint64_t>();
  }

 private:
  static std::string clip(const std::string& s) {
    return s.size() <= 40 ? s : s.substr(0, 40) + "...";
  }
  const nlohmann::json& j_;
  absl::Status st_;
};

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return bad(absl::StrCat("the model config is JSON ", j.type_name(), ", not an object"));
  ModelConfig c;
  JsonFields in(j);
  in.number("n_layer", c.n_layer);
  in.number("n_embd", c.n_embd);
  in.number("n_head", c.n_head);
  in.number("n_kv_head", c.n_kv_head);
  in.number("head_dim", c.head_dim);
  in.number("vocab_size", c.vocab_size);
  in.number("seq_len", c.seq_len);
  in.text("window_pattern", c.window_pattern, false);
  in.number("short_window", c.short_window);
  in.number("rope_base", c.rope_base);
  in.number("norm_eps", c.norm_eps);
  in.number("qk_norm_scale", c.qk_norm_scale);
  in.number("logit_softcap", c.logit_softcap);
  in.number("mlp_ratio", c.mlp_ratio);
  std::string block = block_shape_name(ModelConfig{}.block), value_mode;
  in.text("block", block, true);
  in.boolean("norm_none", c.norm_none, true);
  if (j.contains("qk_norm")) {
    bool on = false;
    in.boolean("qk_norm", on, false);
    c.qk_norm = on ? 1 : 0;
  }
  in.text("reparam_init", c.reparam_init, true);
  in.seed("reparam_seed", c.reparam_seed);
  in.text("attn_bias", c.attn_bias, true);
  in.text("spa_schedule", c.spa_schedule, true);  // absent: "ours", the only one before
  in.text("spa_rescale", c.spa_rescale, true, 8);
  in.text("spa_centre", c.spa_centre, true, 8);
  in.boolean("proj_gains", c.proj_gains, true);
  in.text("mlp_act", c.mlp_act, true);
  in.boolean("dense", c.dense, true);
  in.number("dense_dilation", c.dense_dilation, true);
  in.number("dense_period", c.dense_period, true);
  in.number("neutreno_lambda", c.neutreno_lambda, true);
  in.text("value_mode", value_mode, false);
  in.text("value_layers", c.value_layers, false);
  in.boolean("detach_v1", c.detach_v1, false);
  in.boolean("shared_table", c.shared_table, false);
  in.boolean("bov_add_fixed", c.bov_add_fixed, false);
  in.boolean("value_coef_fixed", c.value_coef_fixed, true);
  in.number("value_coef", c.value_coef, true);
  in.text("plus_init", c.plus_init, true, 16);
  in.text("plus_scale", c.plus_scale, true, 16);
  in.number("value_embed_gate_channels", c.value_embed_gate_channels, true);
  in.number("value_embed_gate_scale", c.value_embed_gate_scale, true);
  in.text("window_keys", c.window_keys, true, 8);  // absent in older checkpoints: "w", off
  in.boolean("smear_gate", c.smear_gate, true);
  VT_RETURN_IF_ERROR(in.status());
  VT_ASSIGN_OR_RETURN(c.block, parse_block_shape(block));
  // A config written before --proj-gains existed (no "proj_gains") describes sas/sas-p with
  // vtrain's earlier projections: gains on the identities, layer 0's W_O reparameterized.
  if (!j.contains("proj_gains"))
    c.proj_gains = c.block == BlockShapeKind::kSas || c.block == BlockShapeKind::kSasP;
  VT_ASSIGN_OR_RETURN(c.value_mode, parse_value_mode(value_mode));
  // An --attn-bias config written before --spa-rescale / --spa-centre existed describes what
  // vtrain trained then: no rescaling, the uniform causal centring matrix.
  if (!c.attn_bias.empty()) {
    if (!j.contains("spa_rescale")) c.spa_rescale = "off";
    if (!j.contains("spa_centre")) c.spa_centre = "uniform";
  }
  // A resformer-plus config written before --plus-init / --plus-scale existed (no such fields)
  // describes the model vtrain trained then: BlaGPT's logits and the fixed scale L.
  if (c.value_mode == ValueMode::kResformerPlus) {
    if (!j.contains("plus_init")) c.plus_init = "blagpt";
    if (!j.contains("plus_scale")) c.plus_scale = "fixed";
  }
  VT_RETURN_IF_ERROR(c.finalize());
  // Derived fields stored beside the inputs must agree with what they derive from.
  if (auto it = j.find("vocab_padded"); it != j.end() &&
      !(it->is_number_integer() && it->get<int64_t>() == c.vocab_padded))
    return bad(absl::StrCat("field vocab_padded ", it->dump().substr(0, 40), " does not match ",
                            c.vocab_padded, " (vocab_size ", c.vocab_size,
                            " rounded up to a multiple of 64)"));
  return c;
}

ModelConfig config_from_depth(int n_layer) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_embd = (64 * n_layer + 127) / 128 * 128;
  c.head_dim = 128;
  c.n_head = c.n_embd / 128;
  c.n_kv_head = c.n_head;
  c.vocab_size = 32768;
  c.seq_len = 2048;
  return c;
}

absl::StatusOr<ModelConfig> preset_config(const std::string& name) {
  if (name == "tiny") {
    ModelConfig c;  // L4, d128, hd32, H4
    c.n_layer = 4;
    c.n_embd = 128;
    c.head_dim = 32;
    c.n_head = 4;
    c.n_kv_head = 4;
    c.vocab_size = 32768;
    c.seq_len = 256;
    return c;
  }
  if (name == "d12") return config_from_depth(12);
  if (name == "d24") return config_from_depth(24);
  if (name == "d32") return config_from_depth(32);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name, "'; choose one of: tiny, d12, d24, d32"));
}

}  // namespace vt
