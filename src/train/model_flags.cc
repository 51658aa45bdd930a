// Model flags shared by `vtrain train` and `vtrain plan` (see model_flags.h).
#include "train/model_flags.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace vt {

namespace {
// An integer or number flag whose range is the config field's (model/config.h: one table for the
// flags and for configs read from checkpoints).
FlagSpec field_flag(const char* field, double def, const std::string& help) {
  const ConfigFieldRange& r = config_field_range(field);
  return r.integer ? int_flag(r.flag, static_cast<int64_t>(def), r.lo, r.hi, help)
                   : num_flag(r.flag, def, r.lo, r.hi, help);
}
}  // namespace

std::vector<FlagSpec> model_flag_specs() {
  return {
        flag_heading("model"),
        choice_flag("preset", "tiny", {"tiny", "d12", "d24", "d32"},
                    "the model size; the flags below override it (their defaults are the preset's)"),
        no_default(field_flag("n_layer", 0, "transformer blocks")),
        no_default(field_flag("n_embd", 0, "model width d")),
        no_default(field_flag("n_head", 0, "query heads")),
        no_default(field_flag("n_kv_head", 0, "key/value heads (GQA; divides --heads)")),
        no_default(field_flag("head_dim", 0, "head size (even, for RoPE)")),
        no_default(field_flag("seq_len", 0, "tokens per row T")),
        no_default(field_flag("short_window", 0, "tokens an S layer of the window pattern sees")),
        text_flag("window-pattern", "", "the preset's unless given; e.g. SSSL, tiled over the layers (the last layer is L)"),
        flag_heading("values"),
        text_flag("value", "baseline",
                  "baseline resformer-identity resformer-constant resformer-learnable "
                  "resformer-plus resformer-sparse resformer-dense svformer v1 x0v bov bov-add "
                  "value-embed neutreno"),
        text_flag("value-layers", "default", "last-third|all|every-other|alternate|LIST of layers"),
        bool_flag("detach-v1", "stop the gradient through V1"),
        bool_flag("shared-table", "one value table for all target layers (bov)"),
        bool_flag("bov-add-fixed", "bov-add with fixed 0.5/0.5 coefficients"),
        no_default(field_flag("neutreno_lambda", 0.4,
                            "NeuTRENO's lam (value mode neutreno; default 0.4)")),
        flag_heading("blocks (docs/model.md)"),
        choice_flag("block", "prenorm", {"prenorm", "parallel", "vskipinit", "sas", "sas-p"},
                    "the shape of every block"),
        choice_flag("norm", "rms", {"rms", "none"},
                    "none: no pre-norms in layers >= 1 (sas, sas-p)"),
        no_default(choice_flag("qk-norm", "", {"on", "off"},
                               "QK-norm (default: on, off for sas and sas-p)")),
        no_default(choice_flag("reparam-init", "", {"id", "orth"},
                               "reparameterize every layer's W_V, W_O as s*W0 + r*dW (sas, sas-p)")),
        no_default(choice_flag("attn-bias", "", {"espa", "uspa"},
                               "E-SPA / U-SPA attention-logit biases (sas, sas-p)")),
        bool_flag("dense", "DenseFormer: depth-weighted averages of earlier block outputs"),
        no_default(field_flag("dense_dilation", 1, "DenseFormer: every k-th earlier output")),
        no_default(field_flag("dense_period", 1,
                            "DenseFormer: an average after every p-th block (divides --layers)")),
  };
}

// --block and its options, DenseFormer, NeuTRENO's lambda (docs/model.md, "Block shapes").
// Spelling and ranges are the flag table's; combinations are checked by ModelConfig::finalize
// and the block shape's validate; here what the flags alone say.
static absl::Status parse_block_options(const Flags& f, ModelConfig& m) {
  VT_ASSIGN_OR_RETURN(m.block, parse_block_shape(f.get_string("block")));
  m.norm_none = f.get_string("norm") == "none";
  if (f.has("qk-norm")) m.qk_norm = f.get_string("qk-norm") == "on" ? 1 : 0;
  if (f.has("reparam-init")) m.reparam_init = f.get_string("reparam-init");
  if (f.has("attn-bias")) m.attn_bias = f.get_string("attn-bias");
  m.dense = f.get_bool("dense");
  if (!m.dense && (f.has("dense-dilation") || f.has("dense-period")))
    return absl::InvalidArgumentError("--dense-dilation and --dense-period need --dense");
  if (f.has("dense-dilation")) m.dense_dilation = static_cast<int>(f.get_int("dense-dilation"));
  if (f.has("dense-period")) m.dense_period = static_cast<int>(f.get_int("dense-period"));
  if (f.has("neutreno-lambda")) {
    if (m.value_mode != ValueMode::kNeutreno)
      return absl::InvalidArgumentError("--neutreno-lambda applies only to --value neutreno");
    m.neutreno_lambda = f.get_double("neutreno-lambda");
  }
  return absl::OkStatus();
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
  VT_ASSIGN_OR_RETURN(m.value_mode, parse_value_mode(f.get_string("value")));
  m.value_layers = f.get_string("value-layers");
  m.detach_v1 = f.get_bool("detach-v1");
  m.shared_table = f.get_bool("shared-table");
  m.bov_add_fixed = f.get_bool("bov-add-fixed");
  VT_RETURN_IF_ERROR(parse_block_options(f, m));
  return m;
}

}  // namespace vt
