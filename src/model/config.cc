// ModelConfig validation, presets, target-layer resolution, and JSON.
#include "model/config.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "model/block_shape.h"
#include "model/value_path.h"

namespace vt {

namespace {
absl::Status bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }
}  // namespace

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
  if (n_layer < 1) return bad(absl::StrCat("--layers must be >= 1 (got ", n_layer, ")"));
  if (n_embd < 1) return bad(absl::StrCat("--dim must be >= 1 (got ", n_embd, ")"));
  if (n_head < 1) return bad(absl::StrCat("--heads must be >= 1 (got ", n_head, ")"));
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

absl::StatusOr<ModelConfig> ModelConfig::from_json(const nlohmann::json& j) {
  ModelConfig c;
  try {
    c.n_layer = j.at("n_layer");
    c.n_embd = j.at("n_embd");
    c.n_head = j.at("n_head");
    c.n_kv_head = j.at("n_kv_head");
    c.head_dim = j.at("head_dim");
    c.vocab_size = j.at("vocab_size");
    c.seq_len = j.at("seq_len");
    c.window_pattern = j.at("window_pattern");
    c.short_window = j.at("short_window");
    c.rope_base = j.at("rope_base");
    c.norm_eps = j.at("norm_eps");
    c.qk_norm_scale = j.at("qk_norm_scale");
    c.logit_softcap = j.at("logit_softcap");
    c.mlp_ratio = j.at("mlp_ratio");
    auto shape = parse_block_shape(j.value("block", std::string("prenorm")));
    if (!shape.ok()) return shape.status();
    c.block = *shape;
    c.norm_none = j.value("norm_none", false);
    if (j.contains("qk_norm")) c.qk_norm = j.at("qk_norm").get<bool>() ? 1 : 0;
    c.reparam_init = j.value("reparam_init", std::string());
    c.reparam_seed = j.value("reparam_seed", uint64_t{0});
    c.attn_bias = j.value("attn_bias", std::string());
    c.dense = j.value("dense", false);
    c.dense_dilation = j.value("dense_dilation", 1);
    c.dense_period = j.value("dense_period", 1);
    c.neutreno_lambda = j.value("neutreno_lambda", 0.4);
    auto mode = parse_value_mode(j.at("value_mode").get<std::string>());
    if (!mode.ok()) return mode.status();
    c.value_mode = *mode;
    c.value_layers = j.at("value_layers");
    c.detach_v1 = j.at("detach_v1");
    c.shared_table = j.at("shared_table");
    c.bov_add_fixed = j.at("bov_add_fixed");
    c.value_embed_gate_channels = j.value("value_embed_gate_channels", 12);
    c.value_embed_gate_scale = j.value("value_embed_gate_scale", 3.0);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("model config JSON is incomplete: ", e.what()));
  }
  VT_RETURN_IF_ERROR(c.finalize());
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
