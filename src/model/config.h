// ModelConfig: every number that defines a network of docs/model.md (sizes, attention windows,
// block shape, value mode and its target layers), the presets (tiny, d12, d24, d32), validation
// with messages a user can act on, and JSON round-trip (stored in checkpoints and case files).
// Defined in config.cc; the members that consult the registries and GPT in config_rules.cc.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/flags.h"
#include "model/block_shape_kind.h"
#include "model/value_mode.h"
#include "nlohmann/json.hpp"

namespace vt {

struct ModelConfig {
  int n_layer = 4;
  int n_embd = 128;
  int n_head = 4;
  int n_kv_head = 4;
  int head_dim = 32;
  int vocab_size = 32768;  // real vocabulary; storage is padded to a multiple of 64
  int seq_len = 256;
  std::string window_pattern = "SSSL";
  int short_window = 0;    // 0: ceil(T/4/128)*128 (docs/model.md)
  double rope_base = 100000.0;
  double norm_eps = 1e-6;
  double qk_norm_scale = 1.2;
  double logit_softcap = 15.0;
  int mlp_ratio = 4;
  // Block shape and its options (docs/model.md, "Block shapes").
  BlockShapeKind block = BlockShapeKind::kPrenorm;
  bool norm_none = false;          // --norm none: no pre-norms in layers >= 1 (sas, sas-p)
  int qk_norm = -1;                // --qk-norm: -1 the shape's default, 0 off, 1 on
  std::string reparam_init;        // --reparam-init: "" (layer 0 only), "id" or "orth"
  uint64_t reparam_seed = 0;       // the run seed the orthogonal W0 is drawn from
  std::string attn_bias;           // --attn-bias: "", "espa" or "uspa"
  std::string spa_schedule = "ours";  // --spa-schedule: ours or simplest (E-SPA only)
  // With --attn-bias: --spa-rescale on|off (the location-dependent rescaling D_l) and
  // --spa-centre bias|uniform (shaped attention's centring matrix: softmax(B_l), or the uniform
  // causal one); "" without --attn-bias, and until finalize() fills the defaults (on, bias).
  std::string spa_rescale;
  std::string spa_centre;
  bool proj_gains = false;         // --proj-gains on: vtrain's earlier sas/sas-p projections (ours)
  std::string mlp_act = "relu2";   // --mlp-act: relu2 (max(x,0)^2) or relu
  // DenseFormer (docs/model.md, "DenseFormer").
  bool dense = false;
  int dense_dilation = 1;
  int dense_period = 1;
  double neutreno_lambda = 0.4;    // value mode neutreno
  ValueMode value_mode = ValueMode::kBaseline;
  std::string value_layers = "default";  // default|last-third|all|every-other|alternate|LIST
  bool detach_v1 = false;
  bool shared_table = false;   // bov only: one table for all target layers
  bool bov_add_fixed = false;  // bov-add only: fixed a = b = 0.5, no learnable a/b
  // v1 and x0v only (--value-coef NUMBER): v = value_coef * source with no learnable gain.
  bool value_coef_fixed = false;
  double value_coef = 1.0;
  // resformer-plus only: the logits' init ("paper" or "blagpt") and the scale ("learnable" or
  // "fixed"); empty until finalize() fills the defaults (paper, learnable) for resformer-plus.
  std::string plus_init;
  std::string plus_scale;
  int value_embed_gate_channels = 12;
  double value_embed_gate_scale = 3.0;
  // nanochat compatibility (docs/model.md, "Base transformer"): an S layer's query sees W keys
  // ("w", ours) or W + 1 ("w+1", nanochat's flash-attention window (W, 0)); the smear gate
  // (nanochat's research/bank_of_values gpt_base.py) mixes the previous token's embedding in.
  std::string window_keys = "w";
  bool smear_gate = false;

  // Derived (filled by finalize()).
  int vocab_padded = 0;
  std::vector<int> target_layers;

  int mlp_hidden() const { return mlp_ratio * n_embd; }
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_kv_head * head_dim; }
  // Keys a query of layer i sees: T for 'L' layers, the short window for 'S' layers (plus one
  // under window_keys "w+1"), at most T.
  int layer_window(int layer) const;
  bool is_target(int layer) const;
  // Position of `layer` in target_layers, or -1.
  int target_index(int layer) const;
  // Does layer i own a W_V matrix?
  bool layer_has_wv(int layer) const;
  int effective_short_window() const;
  // The objects implementing the value mode and the block shape.
  const ValuePath& value() const { return value_path(value_mode); }
  // QK-norm in effect (--qk-norm, or the block shape's default).
  bool use_qk_norm() const;
  // A target layer's context value is read from norm(x0) rather than x0: with the smear gate and
  // a mode whose context value is x0's (x0v), as the BoV authors' gpt_base.py normalizes the
  // smeared x0 again (docs/model.md "Value paths"). Without the gate x0 is already normalized.
  bool value_renorms_x0() const;

  // Parameters of the whole model (exact, 64-bit; model/config.cc counts what GPT registers).
  int64_t param_count() const;

  // Validates every field and fills the derived ones. Messages name the bad field.
  absl::Status finalize();

  nlohmann::json to_json() const;
  static absl::StatusOr<ModelConfig> from_json(const nlohmann::json& j);
};

// The declared range of every numeric ModelConfig field (docs/design.md, "Untrusted inputs"): one
// table. The model flags (cli/model_flags.cc) take their ranges from it, finalize() holds every
// config to it, and from_json (a checkpoint's config attribute, a case file) refuses a field that
// is missing, of the wrong JSON type, not an integer where one is declared, or outside its range,
// naming the field, the flag that sets it and the range, before anything is allocated.
struct ConfigFieldRange {
  const char* field;  // the JSON name ("n_layer")
  const char* flag;   // the flag that sets it ("layers"), "" when no flag does
  double lo, hi;      // inclusive
  bool integer;
};
const std::vector<ConfigFieldRange>& config_field_ranges();
const ConfigFieldRange& config_field_range(const std::string& field);
// "n_layer 1000000000 is out of range [1, 4096] (the range of --layers)"-style text for `value`;
// "" when `value` lies in the field's range (and is an integer where one is declared).
std::string config_range_problem(const ConfigFieldRange& r, double value);
// An integer or number flag whose range is the field's (the model flags, and the options value
// modes declare: model_option.h); `def` is the default --help shows.
FlagSpec config_field_flag(const char* field, double def, const std::string& help);

// The most parameters a config may declare (finalize() refuses more): 2^40, about 1.1e12.
inline constexpr int64_t kMaxModelParams = int64_t{1} << 40;

// Presets: tiny (L4, d128, hd32), d12, d24, d32 (docs/model.md, vocabulary 32768).
absl::StatusOr<ModelConfig> preset_config(const std::string& name);

// Sizes from depth (nanochat rule): d = ceil(64*L/128)*128, hd = 128, H = d/128.
ModelConfig config_from_depth(int n_layer);

// Parses a target-layer spec for `mode` on `n_layer` layers.
absl::StatusOr<std::vector<int>> resolve_target_layers(ValueMode mode, const std::string& spec,
                                                       int n_layer);

}  // namespace vt
