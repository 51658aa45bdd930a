// ModelConfig validation, presets, target-layer resolution, and JSON.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "absl/strings/str_format.h"
#include "core/arena.h"
#include "model/block_shape.h"
#include "model/gpt.h"
#include "model/value_path.h"

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

int64_t ModelConfig::param_count() const {
  ModelConfig c = *this;
  if (c.vocab_padded == 0) c.vocab_padded = (c.vocab_size + 63) / 64 * 64;
  ParamStore store;  // registration only: no memory
  GPT model(c);
  model.register_params(store);
  int64_t n = 0;
  for (const ParamInfo& p : store.infos()) n += shape_numel(p.global_shape);
  return n;
}

int ModelConfig::effective_short_window() const {
  if (short_window > 0) return short_window;
  // ceil(T/4/128)*128
  int w = ((seq_len + 3) / 4 + 127) / 128 * 128;
  return w;
}

bool ModelConfig::use_qk_norm() const {
  return qk_norm < 0 ? block_shape(block).default_qk_norm() : qk_norm == 1;
}

int ModelConfig::layer_window(int layer) const {
  if (layer == n_layer - 1) return seq_len;
  char c = window_pattern[layer % window_pattern.size()];
  if (c == 'L') return seq_len;
  return std::min(effective_short_window(), seq_len);
}

bool ModelConfig::is_target(int layer) const { return target_index(layer) >= 0; }

int ModelConfig::target_index(int layer) const {
  auto it = std::find(target_layers.begin(), target_layers.end(), layer);
  return it == target_layers.end() ? -1 : static_cast<int>(it - target_layers.begin());
}

bool ModelConfig::layer_has_wv(int layer) const {
  if (!is_target(layer)) return true;
  return value().target_has_wv();
}

absl::StatusOr<std::vector<int>> resolve_target_layers(ValueMode mode, const std::string& spec,
                                                       int n_layer) {
  std::vector<int> out;
  const ValuePath& path = value_path(mode);
  const bool v1 = path.reads_v1();
  const int first = v1 ? 1 : 0;
  if (path.default_targets() == DefaultTargets::kNone) {
    if (spec != "default" && spec != "none" && !spec.empty())
      return bad(absl::StrCat("--value-layers has no meaning for value mode '", path.name(),
                              "' (it has no target layers)"));
    return out;
  }
  std::string s = spec;
  if (s == "default") {
    switch (path.default_targets()) {
      case DefaultTargets::kLastThird: s = "last-third"; break;
      case DefaultTargets::kAlternate: s = "alternate"; break;
      default: s = "all";
    }
  }
  if (s == "all") {
    for (int i = first; i < n_layer; ++i) out.push_back(i);
  } else if (s == "last-third") {
    for (int i = std::max(first, 2 * n_layer / 3); i < n_layer; ++i) out.push_back(i);
  } else if (s == "every-other") {
    for (int i = 1; i < n_layer; i += 2) out.push_back(i);
  } else if (s == "alternate") {
    for (int i = 0; i < n_layer; ++i)
      if ((n_layer - 1 - i) % 2 == 0 && i >= first) out.push_back(i);
  } else {
    std::set<int> seen;
    for (absl::string_view part : absl::StrSplit(s, ',')) {
      int layer = 0;
      if (!absl::SimpleAtoi(part, &layer))
        return bad(absl::StrCat("--value-layers: '", spec,
                                "' is not one of default, last-third, all, every-other, "
                                "alternate, or a comma-separated list of layer indices"));
      if (layer < 0 || layer >= n_layer)
        return bad(absl::StrCat("--value-layers: layer ", layer, " is out of range (the model has ",
                                n_layer, " layers, indexed 0..", n_layer - 1, ")"));
      if (layer == 0 && v1)
        return bad(absl::StrCat("--value-layers: layer 0 cannot be a target of value mode '",
                                value_mode_name(mode), "' (it produces V1 itself)"));
      if (!seen.insert(layer).second)
        return bad(absl::StrCat("--value-layers: layer ", layer, " is listed twice"));
    }
    out.assign(seen.begin(), seen.end());
  }
  if (out.empty())
    return bad(absl::StrCat("--value-layers '", spec, "' selects no layer for value mode '",
                            value_mode_name(mode), "' on ", n_layer, " layers"));
  return out;
}

absl::Status ModelConfig::finalize() {
  // The declared ranges first (the flags are held to them when parsed; a config built in code or
  // read from a file here), so that every product below fits its type.
  const std::pair<const char*, double> values[] = {
      {"n_layer", n_layer}, {"n_embd", n_embd}, {"n_head", n_head}, {"n_kv_head", n_kv_head},
      {"head_dim", head_dim}, {"vocab_size", vocab_size}, {"seq_len", seq_len},
      {"rope_base", rope_base}, {"norm_eps", norm_eps}, {"qk_norm_scale", qk_norm_scale},
      {"logit_softcap", logit_softcap}, {"mlp_ratio", mlp_ratio},
      {"dense_dilation", dense_dilation}, {"dense_period", dense_period},
      {"neutreno_lambda", neutreno_lambda},
      {"value_embed_gate_channels", value_embed_gate_channels},
      {"value_embed_gate_scale", value_embed_gate_scale}};
  for (const auto& [field, value] : values)
    if (std::string p = config_range_problem(config_field_range(field), value); !p.empty())
      return bad(p);
  if (short_window != 0)  // 0: the default window
    if (std::string p = config_range_problem(config_field_range("short_window"), short_window);
        !p.empty())
      return bad(p);
  if (n_layer < 1) return bad(absl::StrCat("--layers must be >= 1 (got ", n_layer, ")"));
  if (n_embd < 1) return bad(absl::StrCat("--dim must be >= 1 (got ", n_embd, ")"));
  if (n_head < 1) return bad(absl::StrCat("--heads must be >= 1 (got ", n_head, ")"));
  if (n_head > n_embd)
    return bad(absl::StrCat("--heads ", n_head, " exceeds --dim ", n_embd,
                            ": each head needs at least 2 channels (head dim = dim / heads)"));
  if (head_dim < 2 || head_dim % 2 != 0)
    return bad(absl::StrCat("head dimension must be even and >= 2 for RoPE (got ", head_dim, ")"));
  if (n_head * head_dim != n_embd)
    return bad(absl::StrCat("--heads ", n_head, " x head dim ", head_dim, " = ", n_head * head_dim,
                            " does not equal --dim ", n_embd,
                            "; the width must be heads * head dim"));
  if (n_kv_head < 1 || n_head % n_kv_head != 0)
    return bad(absl::StrCat("--kv-heads ", n_kv_head, " must divide --heads ", n_head, " (GQA)"));
  if (vocab_size < 2) return bad(absl::StrCat("vocabulary size must be >= 2 (got ", vocab_size, ")"));
  if (seq_len < 1) return bad(absl::StrCat("--seq-len must be >= 1 (got ", seq_len, ")"));
  if (window_pattern.empty() ||
      window_pattern.find_first_not_of("SL") != std::string::npos)
    return bad(absl::StrCat("--window-pattern '", window_pattern,
                            "' must be a non-empty string of S and L"));
  if (short_window < 0) return bad(absl::StrCat("--window must be >= 0 (got ", short_window, ")"));
  if (mlp_ratio < 1) return bad("mlp ratio must be >= 1");
  if (shared_table && value_mode != ValueMode::kBov)
    return bad("--shared-table applies only to value mode 'bov'");
  if (bov_add_fixed && value_mode != ValueMode::kBovAdd)
    return bad("--bov-add-fixed applies only to value mode 'bov-add'");
  VT_RETURN_IF_ERROR(value().validate(*this));
  auto targets = resolve_target_layers(value_mode, value_layers, n_layer);
  if (!targets.ok()) return targets.status();
  target_layers = *targets;
  if (value().reads_v1() && n_layer < 2)
    return bad(absl::StrCat("value mode '", value_mode_name(value_mode),
                            "' needs at least 2 layers"));
  vocab_padded = (vocab_size + 63) / 64 * 64;
  if (qk_norm < -1 || qk_norm > 1) return bad("--qk-norm must be on or off");
  if (!reparam_init.empty() && reparam_init != "id" && reparam_init != "orth")
    return bad(absl::StrCat("--reparam-init '", reparam_init, "' must be id or orth"));
  if (!attn_bias.empty() && attn_bias != "espa" && attn_bias != "uspa")
    return bad(absl::StrCat("--attn-bias '", attn_bias, "' must be espa or uspa"));
  VT_RETURN_IF_ERROR(block_shape(block).validate(*this));
  if (!dense && (dense_dilation != 1 || dense_period != 1))
    return bad("--dense-dilation and --dense-period apply only with --dense");
  if (dense_dilation < 1)
    return bad(absl::StrCat("--dense-dilation must be >= 1 (got ", dense_dilation, ")"));
  if (dense_period < 1 || n_layer % dense_period != 0)
    return bad(absl::StrCat("--dense-period ", dense_period, " must divide the depth --layers ",
                            n_layer, " (a depth-weighted average follows every p-th block, the "
                            "last one included)"));
  if (!(neutreno_lambda >= 0.0) || neutreno_lambda > 10.0)
    return bad(absl::StrCat("--neutreno-lambda must be in [0, 10] (got ", neutreno_lambda, ")"));
  if (window_pattern.size() > 4096)
    return bad(absl::StrCat("--window-pattern is ", window_pattern.size(),
                            " characters long; at most 4096"));
  // Derived: the whole model's parameter count (every factor is bounded above, the sum is not).
  if (const int64_t n = param_count(); n > kMaxModelParams)
    return bad(absl::StrCat("the model has ", n, " parameters, above vtrain's limit of ",
                            kMaxModelParams, " (2^40): lower --layers, --dim or the vocabulary"));
  return absl::OkStatus();
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
  j["value_embed_gate_channels"] = value_embed_gate_channels;
  j["value_embed_gate_scale"] = value_embed_gate_scale;
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
  std::string block = "prenorm", value_mode;
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
  in.boolean("dense", c.dense, true);
  in.number("dense_dilation", c.dense_dilation, true);
  in.number("dense_period", c.dense_period, true);
  in.number("neutreno_lambda", c.neutreno_lambda, true);
  in.text("value_mode", value_mode, false);
  in.text("value_layers", c.value_layers, false);
  in.boolean("detach_v1", c.detach_v1, false);
  in.boolean("shared_table", c.shared_table, false);
  in.boolean("bov_add_fixed", c.bov_add_fixed, false);
  in.number("value_embed_gate_channels", c.value_embed_gate_channels, true);
  in.number("value_embed_gate_scale", c.value_embed_gate_scale, true);
  VT_RETURN_IF_ERROR(in.status());
  VT_ASSIGN_OR_RETURN(c.block, parse_block_shape(block));
  VT_ASSIGN_OR_RETURN(c.value_mode, parse_value_mode(value_mode));
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
