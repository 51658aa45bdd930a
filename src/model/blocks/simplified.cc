// Shared parts of sas and sas-p (see simplified.h).
#include "model/blocks/simplified.h"

#include "absl/strings/str_cat.h"
#include "model/block_shape.h"
#include "model/config.h"
#include "model/init.h"
#include "model/param_registrar.h"

namespace vt::simplified {

std::vector<ModelOption> options() {
  return {
      {choice_flag("norm", "rms", {"rms", "none"},
                   "none: no pre-norms in layers >= 1 (sas, sas-p)"),
       [](const Flags& f, ModelConfig& cfg) { cfg.norm_none = f.get_string("norm") == "none"; }},
      {no_default(choice_flag("reparam-init", "", {"id", "orth"},
                              "reparameterize every layer's W_V, W_O as s*W0 + r*dW (sas, sas-p)")),
       [](const Flags& f, ModelConfig& cfg) {
         if (f.has("reparam-init")) cfg.reparam_init = f.get_string("reparam-init");
       }},
      {choice_flag("proj-gains", "off", {"on", "off"},
                   "on: trainable gains on the identity W_V, W_O of layers >= 1 and layer 0's W_O "
                   "reparameterized (vtrain's earlier layout, ours; off: the official code's plain "
                   "identities) (sas, sas-p)"),
       [](const Flags& f, ModelConfig& cfg) { cfg.proj_gains = f.get_string("proj-gains") == "on"; }},
      {choice_flag("spa-schedule", "ours", {"ours", "simplest"},
                   "the E-SPA/U-SPA depth schedule: ours (rho_l = 0.8 (l+1)/L) or simplest "
                   "(SimplEsT-ViT's constant-diagonal rule, gamma_L = 0.005; espa only) (sas, sas-p)"),
       [](const Flags& f, ModelConfig& cfg) { cfg.spa_schedule = f.get_string("spa-schedule"); }},
      {no_default(choice_flag("spa-rescale", "on", {"on", "off"},
                              "with --attn-bias: multiply each position's attention output by "
                              "the row sum of A_l (the location-dependent rescaling; off: ours, "
                              "the earlier vtrain) (sas, sas-p)")),
       [](const Flags& f, ModelConfig& cfg) {
         if (f.has("spa-rescale")) cfg.spa_rescale = f.get_string("spa-rescale");
       }},
      {no_default(choice_flag("spa-centre", "bias", {"bias", "uniform"},
                              "with --attn-bias: shaped attention's centring matrix, softmax(B_l) "
                              "(the zero-query attention) or the uniform causal one (ours, the "
                              "earlier vtrain) (sas, sas-p)")),
       [](const Flags& f, ModelConfig& cfg) {
         if (f.has("spa-centre")) cfg.spa_centre = f.get_string("spa-centre");
       }},
      {no_default(choice_flag("attn-bias", "", {"espa", "uspa"},
                              "E-SPA / U-SPA attention-logit biases (sas, sas-p)")),
       [](const Flags& f, ModelConfig& cfg) {
         if (f.has("attn-bias")) cfg.attn_bias = f.get_string("attn-bias");
       }},
  };
}

absl::Status validate(const ModelConfig& cfg, const char* shape) {
  if (cfg.n_kv_head != cfg.n_head)
    return absl::InvalidArgumentError(absl::StrCat(
        "--block ", shape, " uses identity value and output projections, which need as many KV "
        "heads as heads (Hkv*hd = d); got --kv-heads ", cfg.n_kv_head, " with --heads ",
        cfg.n_head, ": drop --kv-heads or choose --block prenorm|parallel|vskipinit"));
  if (cfg.attn_bias == "uspa")
    for (int i = 0; i < cfg.n_layer; ++i)
      if (cfg.layer_window(i) < cfg.seq_len)
        return absl::InvalidArgumentError(absl::StrCat(
            "--attn-bias uspa with sliding windows: U-SPA's target kernel correlates every pair "
            "of positions, so a windowed layer (layer ", i, " of --window-pattern ",
            cfg.window_pattern, " sees ", cfg.layer_window(i), " of ", cfg.seq_len,
            " positions) drops up to ~80% of each row of its attention matrix and does not "
            "propagate the kernel; use --window-pattern L (full context) or --attn-bias espa"));
  if (cfg.proj_gains && !cfg.reparam_init.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--proj-gains on and --reparam-init ", cfg.reparam_init, " both set the projections of "
        "--block ", shape, ": --reparam-init already reparameterizes every layer's W_V and W_O "
        "with trainable gains; give one of them"));
  return absl::OkStatus();
}

bool keeps_norm(const ModelConfig& cfg, int layer) { return !(cfg.norm_none && layer > 0); }

namespace {

// W = s W0 + r dW with dW a Muon matrix starting at 0 and s = r = 1 (scalars); W0 fixed.
Projection reparam(ParamRegistrar& r, const std::string& p, const std::string& what, int layer,
                   bool columns) {
  const ModelConfig& cfg = r.config();
  const int64_t C = cfg.n_embd;
  Projection pr;
  pr.kind = Projection::Kind::kReparam;
  pr.w = columns ? r.matrix_cols(p + "w" + what, C, C, InitRule::zeros(), layer)
                 : r.matrix_rows(p + "w" + what, C, C, InitRule::zeros(), layer);
  pr.skip = r.gain(p + what + "_skip", 1, InitRule::constant(1.0), layer);
  pr.resid = r.gain(p + what + "_resid", 1, InitRule::constant(1.0), layer);
  return pr;
}

// The identity; with a trainable gain s (init 1) only under --proj-gains on.
Projection identity(ParamRegistrar& r, const std::string& p, const std::string& what, int layer) {
  Projection pr;
  pr.kind = Projection::Kind::kIdentity;
  if (r.config().proj_gains)
    pr.skip = r.gain(p + what + "_skip", 1, InitRule::constant(1.0), layer);
  return pr;
}

}  // namespace

void register_attention_side(ParamRegistrar& r, int layer, LayerParams& lp) {
  const ModelConfig& cfg = r.config();
  const std::string b = "blocks." + std::to_string(layer) + ".";
  const std::string p = b + "attn.";
  block_params::register_qk(r, layer, lp, true);
  // The official code (model_utils.py myGPT2Attention with config/model/skipless.yaml):
  // layer 0's W_V is s I + r dW (first_layer_value_resid_gain), every other W_V and every W_O
  // the plain identity. --reparam-init reparameterizes every layer's W_V and W_O (ours);
  // --proj-gains on adds gains to the identities and reparameterizes layer 0's W_O (ours).
  const bool all = !cfg.reparam_init.empty();
  const bool rep_v = layer == 0 || all;
  const bool rep_o = all || (layer == 0 && cfg.proj_gains);
  if (cfg.layer_has_wv(layer))
    lp.v = rep_v ? reparam(r, p, "v", layer, true) : identity(r, p, "v", layer);
  lp.o = rep_o ? reparam(r, p, "o", layer, false) : identity(r, p, "o", layer);
  // W_proj starts random, as in the official code (N(0, 0.02) there): with W_proj = 0 the
  // skipless block would start as a pure rescaling of its normalized input, and the gains in
  // front of the next norm would have exactly zero gradient (AdamW would step them on noise).
  block_params::register_mlp(r, layer, lp, true);
  const bool bias = !cfg.attn_bias.empty();
  lp.alpha = r.per_head_gain(p + "alpha", InitRule::constant(bias ? 0.0 : 1.0), layer);
  lp.beta = r.per_head_gain(p + "beta", InitRule::constant(1.0), layer);
  lp.gamma = r.per_head_gain(p + "gamma", InitRule::constant(bias ? 0.0 : 1.0), layer);
  lp.attn_gain = r.gain(b + "attn_gain", 1, InitRule::constant(1.0), layer);
  lp.mlp_gain = r.gain(b + "mlp_gain", 1, InitRule::constant(0.1), layer);
}

std::vector<float> projection_base(const ModelConfig& cfg, int layer, bool out) {
  const int64_t C = cfg.n_embd;
  std::vector<float> w(C * C, 0.0f);
  if (cfg.reparam_init != "orth") {
    for (int64_t i = 0; i < C; ++i) w[i * C + i] = 1.0f;
    return w;
  }
  const std::string name =
      "blocks." + std::to_string(layer) + (out ? ".attn.wo_base" : ".attn.wv_base");
  return orthogonal_init(cfg.reparam_seed, name, C, C);
}

}  // namespace vt::simplified
