// The ModelConfig members (declared in config.h) that consult the value-mode and block-shape
// registries and GPT: validation (finalize), the parameter count, the target layers, and the
// facts that depend on the mode or shape. Kept apart from config.cc, because the registries read
// ModelConfig: config.h < value_path.h, block_shape.h, gpt.h < this file.
#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/arena.h"
#include "model/block_shape.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/model_options.h"
#include "model/value_path.h"

namespace vt {

namespace {
absl::Status bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }
}  // namespace

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

bool ModelConfig::use_qk_norm() const {
  return qk_norm < 0 ? block_shape(block).default_qk_norm() : qk_norm == 1;
}

bool ModelConfig::value_renorms_x0() const { return smear_gate && value().context_from_x0(); }

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
  if (smear_gate && n_embd < 24)
    return bad(absl::StrCat("--smear-gate on reads the first 24 channels; --dim ", n_embd,
                            " is too small"));
  if (window_keys != "w" && window_keys != "w+1")
    return bad(absl::StrCat("--window-keys '", window_keys, "' must be w or w+1"));
  if (mlp_ratio < 1) return bad("mlp ratio must be >= 1");
  for (const DeclaredOption& d : value_mode_options())  // a mode's options belong to that mode
    if (d.option.set_in && d.option.set_in(*this) &&
        std::find(d.owners.begin(), d.owners.end(), value_mode_name(value_mode)) == d.owners.end())
      return bad(absl::StrCat("--", d.option.flag.name, " applies only to value mode '",
                              absl::StrJoin(d.owners, "' or '"), "'"));
  value().fill_defaults(*this);
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
  if (spa_schedule != "ours" && spa_schedule != "simplest")
    return bad(absl::StrCat("--spa-schedule '", spa_schedule, "' must be ours or simplest"));
  if (spa_schedule == "simplest" && attn_bias != "espa")
    return bad(absl::StrCat("--spa-schedule simplest is SimplEsT-ViT's E-SPA depth schedule; it "
                            "applies only to --attn-bias espa (got ",
                            attn_bias.empty() ? std::string("no --attn-bias") : "--attn-bias " + attn_bias,
                            ")"));
  if (attn_bias.empty()) {
    for (const auto& [flag, value] : {std::pair{"spa-rescale", spa_rescale}, {"spa-centre", spa_centre}})
      if (!value.empty())
        return bad(absl::StrCat("--", flag, " ", value, " shapes the E-SPA/U-SPA attention of "
                                "--attn-bias espa|uspa; it does not apply without --attn-bias"));
  } else {
    if (spa_rescale.empty()) spa_rescale = "on";
    if (spa_centre.empty()) spa_centre = "bias";
    if (spa_rescale != "on" && spa_rescale != "off")
      return bad(absl::StrCat("--spa-rescale '", spa_rescale, "' must be on or off"));
    if (spa_centre != "bias" && spa_centre != "uniform")
      return bad(absl::StrCat("--spa-centre '", spa_centre, "' must be bias or uniform"));
  }
  if (mlp_act != "relu2" && mlp_act != "relu")
    return bad(absl::StrCat("--mlp-act '", mlp_act, "' must be relu2 or relu"));
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

}  // namespace vt
