// Parsing of `vtrain train` flags into TrainOptions.
#include "train/options.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "data/tokenizer.h"

namespace vt {

std::string train_usage() {
  return R"(usage: vtrain train --data DATADIR [options]
model:      --preset tiny|d12|d24|d32  --layers N --dim N --heads N --kv-heads N --head-dim N
            --seq-len T --window W --window-pattern SSSL
values:     --value MODE [--value-layers last-third|all|every-other|alternate|LIST]
            [--detach-v1] [--shared-table] [--bov-add-fixed]
            MODE: baseline resformer-identity resformer-constant resformer-learnable
                  resformer-plus resformer-sparse resformer-dense svformer v1 x0v bov bov-add
                  value-embed neutreno [--neutreno-lambda 0.4]
blocks:     --block prenorm|parallel|vskipinit|sas|sas-p [--norm none] [--qk-norm on|off]
            [--reparam-init id|orth] [--attn-bias espa|uspa]
            [--dense [--dense-dilation K] [--dense-period P]] (DenseFormer)
layout:     --tp N --pp N (dp = world / (tp*pp))
batch:      --micro-batch B (rows of T tokens) --global-batch TOKENS (multiple of B*T)
schedule:   --steps N --matrix-lr 0.02 --lr-scale 1.0 --warmup 40 --warmdown 0.65
            --max-grad-norm 0 (off) --polar-express
eval:       --eval-every N --eval-tokens N --sample-every N
            --core-every N --core BUNDLE_DIR (the DCLM CORE score every N steps and at the end,
            logged in --metrics; nanochat's eval_bundle) --core-max-per-task N (500; -1: all)
output:     --ckpt-dir DIR --ckpt-every N --keep-last K (3; 0 keeps all)
            --resume auto|PATH|none --metrics FILE.jsonl
            --stop-at-step N (save and exit 75 after step N, as on SIGUSR1)
            --seed S --log-every N
device:     --device cpu|cuda|emulated (cuda: one GPU per rank; emulated: the GPU code path
            run on the CPU, for tests) --act-dtype f32|bf16 (default bf16 off the CPU)
            --device-comm auto|nccl|mpi (how device tensors cross ranks; mpi stages through
            host memory) --recompute (activation recomputation per block: saves only
            each block's input, reruns its forward in backward) --no-overlap-grad-sync (sum
            data-parallel gradients after backward instead of layer by layer during it)
            --muon-ns-dtype f32|bf16 (Newton-Schulz iteration dtype; default bf16 on cuda)
)";
}

nlohmann::json TrainOptions::to_json() const {
  return {{"data_dir", data_dir},       {"tp", tp},
          {"pp", pp},                   {"micro_batch", micro_batch},
          {"global_batch", global_batch}, {"steps", steps},
          {"eval_every", eval_every},   {"eval_tokens", eval_tokens},
          {"seed", seed},               {"matrix_lr", matrix_lr},
          {"lr_scale", lr_scale},       {"warmup_steps", warmup_steps},
          {"warmdown_frac", warmdown_frac}, {"max_grad_norm", max_grad_norm},
          {"polar_express", polar_express}, {"device", device},
          {"act_dtype", act_dtype}, {"device_comm", device_comm}, {"recompute", recompute},
          {"muon_ns_dtype", muon_ns_dtype}, {"core_every", core_every}, {"core_dir", core_dir}};
}

// --block and its options, DenseFormer, NeuTRENO's lambda (docs/model.md, "Block shapes").
// Range and combination checks are the config's (ModelConfig::finalize and the block shape's
// validate); here only the spelling of each value.
static absl::Status parse_block_options(const Flags& f, ModelConfig& m) {
  VT_ASSIGN_OR_RETURN(m.block, parse_block_shape(f.get_string("block", "prenorm")));
  const std::string norm = f.get_string("norm", "rms");
  if (norm != "rms" && norm != "none")
    return absl::InvalidArgumentError(absl::StrCat("--norm must be rms or none, got '", norm, "'"));
  m.norm_none = norm == "none";
  if (f.has("qk-norm")) {
    const std::string q = f.get_string("qk-norm");
    if (q != "on" && q != "off")
      return absl::InvalidArgumentError(absl::StrCat("--qk-norm must be on or off, got '", q, "'"));
    m.qk_norm = q == "on" ? 1 : 0;
  }
  m.reparam_init = f.get_string("reparam-init", "");
  if (f.has("reparam-init") && m.reparam_init.empty())
    return absl::InvalidArgumentError("--reparam-init needs a value: id or orth");
  m.attn_bias = f.get_string("attn-bias", "");
  if (f.has("attn-bias") && m.attn_bias.empty())
    return absl::InvalidArgumentError("--attn-bias needs a value: espa or uspa");
  m.dense = f.get_bool("dense");
  VT_ASSIGN_OR_RETURN(int64_t dil, f.get_int("dense-dilation", 1));
  VT_ASSIGN_OR_RETURN(int64_t per, f.get_int("dense-period", 1));
  if (!m.dense && (f.has("dense-dilation") || f.has("dense-period")))
    return absl::InvalidArgumentError("--dense-dilation and --dense-period need --dense");
  m.dense_dilation = static_cast<int>(dil);
  m.dense_period = static_cast<int>(per);
  if (f.has("neutreno-lambda")) {
    if (m.value_mode != ValueMode::kNeutreno)
      return absl::InvalidArgumentError("--neutreno-lambda applies only to --value neutreno");
    VT_ASSIGN_OR_RETURN(m.neutreno_lambda, f.get_double("neutreno-lambda", m.neutreno_lambda));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainOptions> parse_train_options(int argc, char** argv, int first) {
  VT_ASSIGN_OR_RETURN(
      Flags f,
      Flags::parse(argc, argv, first,
                   {"data", "preset", "layers", "dim", "heads", "kv-heads", "head-dim", "seq-len",
                    "window", "window-pattern", "value", "value-layers", "tp", "pp",
                    "micro-batch", "global-batch", "steps", "eval-every", "eval-tokens",
                    "ckpt-dir", "ckpt-every", "keep-last", "stop-at-step", "resume", "metrics", "seed", "matrix-lr",
                    "lr-scale", "warmup", "warmdown", "max-grad-norm", "log-every",
                    "sample-every", "device", "act-dtype", "device-comm", "muon-ns-dtype",
                    "core-every", "core", "core-max-per-task", "block", "norm", "qk-norm",
                    "reparam-init", "attn-bias", "dense-dilation", "dense-period",
                    "neutreno-lambda"},
                   {"detach-v1", "shared-table", "bov-add-fixed", "polar-express", "recompute",
                    "no-overlap-grad-sync", "dense"}));
  if (!f.positional().empty())
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", f.positional()[0], "'\n", train_usage()));
  TrainOptions o;
  o.data_dir = f.get_string("data");
  if (o.data_dir.empty())
    return absl::InvalidArgumentError(absl::StrCat("--data DATADIR is required\n", train_usage()));
  if (!std::filesystem::is_directory(o.data_dir))
    return absl::NotFoundError(absl::StrCat("--data ", o.data_dir,
                                            " is not a directory; make one with `vtrain prepare`"));
  VT_ASSIGN_OR_RETURN(ModelConfig m, preset_config(f.get_string("preset", "tiny")));
  auto set_int = [&](const char* name, int& field) -> absl::Status {
    VT_ASSIGN_OR_RETURN(int64_t v, f.get_int(name, field));
    field = static_cast<int>(v);
    return absl::OkStatus();
  };
  const bool dim_given = f.has("dim"), heads_given = f.has("heads");
  VT_RETURN_IF_ERROR(set_int("layers", m.n_layer));
  VT_RETURN_IF_ERROR(set_int("dim", m.n_embd));
  VT_RETURN_IF_ERROR(set_int("heads", m.n_head));
  if (!f.has("head-dim") && (dim_given || heads_given) && m.n_head > 0)
    m.head_dim = m.n_embd / m.n_head;  // keep d = H * hd when only one side is given
  VT_RETURN_IF_ERROR(set_int("head-dim", m.head_dim));
  if (!f.has("kv-heads") && heads_given) m.n_kv_head = m.n_head;
  VT_RETURN_IF_ERROR(set_int("kv-heads", m.n_kv_head));
  VT_RETURN_IF_ERROR(set_int("seq-len", m.seq_len));
  VT_RETURN_IF_ERROR(set_int("window", m.short_window));
  m.window_pattern = f.get_string("window-pattern", m.window_pattern);
  VT_ASSIGN_OR_RETURN(m.value_mode, parse_value_mode(f.get_string("value", "baseline")));
  m.value_layers = f.get_string("value-layers", "default");
  m.detach_v1 = f.get_bool("detach-v1");
  m.shared_table = f.get_bool("shared-table");
  m.bov_add_fixed = f.get_bool("bov-add-fixed");
  VT_RETURN_IF_ERROR(parse_block_options(f, m));
  if (dim_given && f.has("heads") && m.n_head * m.head_dim != m.n_embd && !f.has("head-dim"))
    return absl::InvalidArgumentError(absl::StrCat("--heads ", m.n_head, " does not divide --dim ",
                                                   m.n_embd));
  // Vocabulary from the data directory's tokenizer.
  VT_ASSIGN_OR_RETURN(auto tok, data::load_tokenizer(o.data_dir));
  m.vocab_size = tok->vocab_size();
  VT_RETURN_IF_ERROR(m.finalize());
  o.model = m;

  VT_RETURN_IF_ERROR(set_int("tp", o.tp));
  VT_RETURN_IF_ERROR(set_int("pp", o.pp));
  VT_RETURN_IF_ERROR(set_int("micro-batch", o.micro_batch));
  VT_ASSIGN_OR_RETURN(o.global_batch, f.get_int("global-batch", 0));
  VT_ASSIGN_OR_RETURN(o.steps, f.get_int("steps", o.steps));
  VT_ASSIGN_OR_RETURN(o.eval_every, f.get_int("eval-every", 0));
  VT_ASSIGN_OR_RETURN(o.eval_tokens, f.get_int("eval-tokens", o.eval_tokens));
  o.ckpt_dir = f.get_string("ckpt-dir");
  VT_ASSIGN_OR_RETURN(o.ckpt_every, f.get_int("ckpt-every", 0));
  VT_ASSIGN_OR_RETURN(int64_t keep_last, f.get_int("keep-last", o.keep_last));
  o.keep_last = static_cast<int>(keep_last);
  VT_ASSIGN_OR_RETURN(o.stop_at_step, f.get_int("stop-at-step", 0));
  o.resume = f.get_string("resume", "none");
  o.metrics_path = f.get_string("metrics");
  VT_ASSIGN_OR_RETURN(int64_t seed, f.get_int("seed", static_cast<int64_t>(o.seed)));
  o.seed = static_cast<uint64_t>(seed);
  // --reparam-init orth draws W0 from the run seed; the config keeps it (checkpoints, decoding).
  if (o.model.reparam_init == "orth") o.model.reparam_seed = o.seed;
  VT_ASSIGN_OR_RETURN(o.matrix_lr, f.get_double("matrix-lr", o.matrix_lr));
  VT_ASSIGN_OR_RETURN(o.lr_scale, f.get_double("lr-scale", o.lr_scale));
  VT_ASSIGN_OR_RETURN(o.warmup_steps, f.get_int("warmup", o.warmup_steps));
  VT_ASSIGN_OR_RETURN(o.warmdown_frac, f.get_double("warmdown", o.warmdown_frac));
  VT_ASSIGN_OR_RETURN(o.max_grad_norm, f.get_double("max-grad-norm", 0.0));
  VT_ASSIGN_OR_RETURN(o.log_every, f.get_int("log-every", 1));
  VT_ASSIGN_OR_RETURN(o.sample_every, f.get_int("sample-every", 0));
  o.polar_express = f.get_bool("polar-express");
  o.recompute = f.get_bool("recompute");
  o.overlap_grad_sync = !f.get_bool("no-overlap-grad-sync");
  o.muon_ns_dtype = f.get_string("muon-ns-dtype", "default");
  o.device = f.get_string("device", "cpu");
  if (o.device != "cpu" && o.device != "cuda" && o.device != "emulated")
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu, cuda or emulated, got '", o.device, "'"));
  o.act_dtype = f.get_string("act-dtype", o.device == "cpu" ? "f32" : "bf16");
  if (o.act_dtype != "f32" && o.act_dtype != "bf16")
    return absl::InvalidArgumentError(
        absl::StrCat("--act-dtype must be f32 or bf16, got '", o.act_dtype, "'"));
  if (o.muon_ns_dtype == "default") o.muon_ns_dtype = o.device == "cuda" ? "bf16" : "f32";
  if (o.muon_ns_dtype != "f32" && o.muon_ns_dtype != "bf16")
    return absl::InvalidArgumentError(
        absl::StrCat("--muon-ns-dtype must be f32 or bf16, got '", o.muon_ns_dtype, "'"));
  o.device_comm = f.get_string("device-comm", "auto");
  {
    VT_ASSIGN_OR_RETURN(o.core_every, f.get_int("core-every", 0));
    VT_ASSIGN_OR_RETURN(o.core_max_per_task, f.get_int("core-max-per-task", 500));
    o.core_dir = f.get_string("core", "");
    if (o.core_every > 0 && o.core_dir.empty())
      return absl::InvalidArgumentError("--core-every needs --core BUNDLE_DIR (the CORE eval bundle)");
    if (o.core_every < 0) return absl::InvalidArgumentError("--core-every must be >= 0");
  }
  if (o.device_comm != "auto" && o.device_comm != "nccl" && o.device_comm != "mpi")
    return absl::InvalidArgumentError(
        absl::StrCat("--device-comm must be auto, nccl or mpi, got '", o.device_comm, "'"));

  if (o.micro_batch < 1) return absl::InvalidArgumentError("--micro-batch must be >= 1");
  if (o.steps < 1) return absl::InvalidArgumentError("--steps must be >= 1");
  // --global-batch 0 (the default) means one micro-batch per data-parallel rank; the trainer
  // fills it in once it knows the layout.
  if (o.global_batch < 0) return absl::InvalidArgumentError("--global-batch must be >= 0");
  if (o.global_batch > 0 && o.global_batch % o.tokens_per_micro() != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o.global_batch, " tokens is not a multiple of micro-batch x seq-len = ",
        o.tokens_per_micro()));
  if (o.tp < 1 || o.pp < 1) return absl::InvalidArgumentError("--tp and --pp must be >= 1");
  if (o.warmdown_frac < 0 || o.warmdown_frac > 1)
    return absl::InvalidArgumentError("--warmdown is a fraction of the steps in [0, 1]");
  if (o.resume != "none" && o.resume != "auto" && !std::filesystem::exists(o.resume))
    return absl::NotFoundError(absl::StrCat("--resume ", o.resume,
                                            ": no such checkpoint (use auto, none or a path)"));
  return o;
}

}  // namespace vt
