// The flag table of `vtrain train` (the model flags are cli/model_flags.cc's) and its parsing
// into TrainOptions (train/options.h).
#include "cli/train_flags.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/model_flags.h"
#include "cli/recipes.h"
#include "core/check.h"
#include "data/mixture.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "model/flops.h"
#include "model/value_path.h"
#include "parallel/process_grid.h"

namespace vt {

const CommandSpec& train_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain train";
    c.synopsis = "vtrain train --data DATADIR [options]   (under mpirun for dp x tp x pp)";
    c.flags = {
        flag_heading("data"),
        required(text_flag("data", "",
                           "a data directory made by `vtrain prepare`, or a mixture of several: "
                           "NAME=DIR:WEIGHT,... or a .json file (docs/usage.md \"Data "
                           "mixtures\")")),
        list_flag("data-stage",
                  "TOKENS:NAME=WEIGHT,...: the mixture's weights from that many training "
                  "tokens on (e.g. 180e9:web=0.3,code=0.2,books=0.5; sources not named weigh 0); "
                  "repeat for more stages"),
        flag_heading("recipe"),
        choice_flag("recipe", "vtrain", recipe_names(),
                    "fill in the flags a paper trained with (flags given by hand win): " +
                        recipes_help()),
    };
    for (const FlagSpec& m : model_flag_specs()) c.flags.push_back(m);
    for (const FlagSpec& m : std::vector<FlagSpec>{
        flag_heading("layout"),
        int_flag("tp", 1, 1, 1 << 20, "tensor-parallel ranks"),
        int_flag("pp", 1, 1, 1 << 20, "pipeline stages (dp = ranks / (tp*pp))"),
        int_flag("vpp", 1, 1, 1 << 20,
                 "model chunks (virtual stages) per pipeline rank: Megatron's interleaved 1F1B, "
                 "bubble (pp-1)/(vpp*micro-batches); needs --pp > 1, vpp dividing the layers per "
                 "stage and micro-batches per step a multiple of pp"),
        flag_heading("batch"),
        int_flag("micro-batch", 4, 1, 1 << 24, "rows of T tokens per forward/backward"),
        int_flag("global-batch", 0, 0, 1e15,
                 "tokens per optimizer step, a multiple of micro-batch x T x dp (0: one micro-batch per dp rank)"),
        flag_heading("schedule"),
        int_flag("steps", 100, 1, 1e12, "optimizer steps"),
        num_flag("matrix-lr", 0.02, 0, 1e3, "Muon's peak learning rate"),
        num_flag("scalar-lr", 0.5, 0, 1e3,
                 "AdamW peak lr of the scalar group: value-mode gains and lambdas, DenseFormer "
                 "weights, logits (docs/model.md)"),
        num_flag("gain-lr", 0.01, 0, 1e3,
                 "AdamW peak lr of the block shapes' gains (vskipinit, sas, sas-p)"),
        choice_flag("coef-optim", "paper", {"paper", "vtrain"},
                    "paper: each value path's and DenseFormer's coefficients as its paper's code "
                    "trains them (BoV's gains betas 0.96/0.95, bov-add's a at --scalar-lr x 0.01 "
                    "with wd 0.05; ResFormer's lambdas and DenseFormer's weights at --matrix-lr, "
                    "betas 0.9/0.95); vtrain: all at --scalar-lr, betas 0.8/0.95 (docs/model.md)"),
        choice_flag("lr-batch-scale", "none", {"none", "nanochat"},
                    "nanochat: every group's peak lr but the smear gate's and the gains' x "
                    "sqrt(global batch / 2^19), as nanochat's base_train scales them"),
        num_flag("lr-scale", 1.0, 0, 1e6, "multiplies every group's peak learning rate"),
        int_flag("warmup", 40, 0, 1e12, "linear warmup steps"),
        num_flag("warmdown", 0.65, 0, 1, "fraction of the steps in the final linear decay"),
        no_default(num_flag("warmup-frac", 0, 0, 1,
                            "linear warmup as a fraction of --steps, rounded up (instead of --warmup)")),
        num_flag("final-lr-frac", 0.05, 0, 1, "lr multiplier reached at the end of the warmdown"),
        num_flag("max-grad-norm", 0, 0, 1e12, "clip the global gradient norm (0: off)"),
        choice_flag("optimizer", "muon", {"muon", "adamw"},
                    "muon: Muon for the block matrices, AdamW groups for the rest (docs/model.md); "
                    "adamw: one AdamW for every parameter (--adamw-lr, --weight-decay)"),
        no_default(num_flag("adamw-lr", 1e-3, 1e-12, 1e3,
                            "--optimizer adamw: the peak lr of every parameter (default 0.001)")),
        no_default(num_flag("weight-decay", 0.1, 0, 10,
                            "--optimizer adamw: decoupled weight decay of all but the gains and "
                            "scalars (default 0.1)")),
        bool_flag("polar-express", "Polar Express coefficients for Newton-Schulz"),
        num_flag("muon-wd", 0, 0, 1e3, "Muon's weight decay (decoupled, times the lr)"),
        choice_flag("muon-wd-style", "decoupled", {"decoupled", "nanochat"},
                    "nanochat: cautious decay (only where update and weight agree in sign), "
                    "times Muon's aspect scale, on a cosine to 0 over the run (docs/model.md)"),
        choice_flag("muon-wd-scale", "none", {"none", "nanochat"},
                    "nanochat: --muon-wd x sqrt(global batch / 2^19) x (d12's scaling params / "
                    "this model's), as nanochat's base_train scales its 0.28"),
        choice_flag("muon-momentum", "warmup", {"warmup", "nanochat"},
                    "warmup: 0.85 -> 0.95 over 300 steps; nanochat: 0.85 -> 0.97 over 400 steps, "
                    "then down to 0.90 across the lr warmdown"),
        flag_heading("non-finite values"),
        choice_flag("on-nonfinite", "stop", {"stop", "skip-step"},
                    "a non-finite loss or gradient norm: stop naming where it appeared, or discard "
                    "that step's update"),
        int_flag("max-nonfinite-steps", 3, 1, 1e6,
                 "with skip-step: stop after this many non-finite steps in a row"),
        flag_heading("evaluation"),
        int_flag("eval-every", 0, 0, 1e12, "validation loss every N steps (0: only at the end)"),
        int_flag("eval-tokens", 65536, 1, 1e12, "validation tokens per evaluation"),
        no_default(int_flag("final-eval-tokens", 0, 0, 1e12,
                            "validation tokens of the evaluation after the last step (default: "
                            "--eval-tokens; 0: no final evaluation)")),
        int_flag("sample-every", 0, 0, 1e12, "a short greedy sample every N steps (one CPU rank)"),
        int_flag("core-every", 0, 0, 1e12, "the DCLM CORE score every N steps and at the end"),
        text_flag("core", "", "the CORE eval bundle directory (nanochat's eval_bundle)"),
        int_flag("core-max-per-task", 500, -1, 1e9, "CORE examples per task (-1: all)"),
        flag_heading("output"),
        text_flag("ckpt-dir", "", "checkpoint directory (one run at a time)"),
        int_flag("ckpt-every", 0, 0, 1e12, "save every N steps (0: only at the end)"),
        int_flag("keep-last", 3, 0, 1e6, "checkpoints kept (0: all)"),
        bool_flag("async-save",
                  "write checkpoints in the background: training pauses only to copy the state to "
                  "host memory (which needs that memory once more)"),
        text_flag("resume", "none", "auto (the newest good checkpoint of --ckpt-dir), PATH or none"),
        bool_flag("allow-other-data",
                  "resume even when --data is not the data the checkpoint was trained on (its "
                  "data fingerprint: tokenizer and training shards); the loader continues at "
                  "the checkpoint's position"),
        text_flag("metrics", "", "metrics JSON lines file"),
        text_flag("tensorboard", "",
                  "also write every metric as TensorBoard scalars (and the configuration as "
                  "text) into event files in this directory (rank 0)"),
        int_flag("stop-at-step", 0, 0, 1e12, "save and exit 75 after step N, as on SIGUSR1"),
        int_flag("seed", 1337, 0, 9.2e18, "initialization and data order"),
        int_flag("log-every", 1, 1, 1e12, "progress line every N steps"),
        int_flag("health-every", 50, 0, 1e9,
                 "every N steps gather each rank's compute, communication wait and data time "
                 "and name stragglers (0: never)"),
        num_flag("straggler-margin", 0.2, 0, 100,
                 "a rank whose compute per step is above the median by this fraction (and "
                 "--straggler-min-s) is a straggler"),
        num_flag("straggler-min-s", 0.02, 0, 1e6,
                 "seconds per step above the median a straggler must also be"),
        flag_heading("device"),
        choice_flag("device", "cpu", {"cpu", "cuda", "emulated"},
                    "cuda: one GPU per rank; emulated: the device code path on the CPU, for tests"),
        choice_flag("act-dtype", "", {"f32", "bf16"}, "activations (default bf16 off the CPU, f32 on it)"),
        choice_flag("device-comm", "auto", {"auto", "nccl", "mpi"},
                    "how device tensors cross ranks (mpi stages through host memory)"),
        choice_flag("muon-ns-dtype", "", {"f32", "bf16"}, "Newton-Schulz dtype (default bf16 on cuda)"),
        choice_flag("recompute", "off", recompute_names(),
                    "what backward reruns instead of keeping it: attn (the attention core), mlp "
                    "(the MLP activation), block (all but each block's input)"),
        choice_flag("fp8", "off", {"off", "e4m3"},
                    "e4m3: the blocks' linear GEMMs in FP8 (E4M3 activations and weights, E5M2 "
                    "gradients, per-tensor current scaling; lm head and attention stay bf16); "
                    "on the CPU a fake quantization: the same numerics, no speed"),
        bool_flag("table-offload",
                  "keep the value tables (bov, bov-add, value-embed) and their AdamW states in "
                  "host memory; only the rows a step reads go to the device"),
        bool_flag("no-overlap-grad-sync", "sum data-parallel gradients after backward, not during it"),
        choice_flag("cuda-graphs", "off", {"off", "micro-step", "step"},
                    "micro-step: replay each micro-batch's forward + backward from a CUDA graph "
                    "after an eager first step; step: the optimizer step too, its norm, clip and "
                    "finite check on the device (--device cuda, one GPU, no pipeline, tensor or "
                    "data parallelism, no --table-offload or --profile)"),
        choice_flag("grad-sync", "fp32", {"fp32", "bf16"},
                    "the data-parallel gradient sum's wire format: bf16 sends half the bytes "
                    "(each rank's gradient rounded to bf16, every addition done in fp32 and "
                    "rounded to bf16; also rounds with dp 1)"),
        int_flag("zero", 1, 1, 2,
                 "ZeRO stage of the data-parallel optimizer: 1 all-reduces the gradients, 2 "
                 "reduce-scatters them into the ranks that own their optimizer states (half "
                 "the bytes; the wire is --grad-sync's)"),
        bool_flag("skip-memory-check",
                  "start even when the memory estimate exceeds the free host/device memory"),
        no_default(num_flag("memory-limit-gib", 0, 0.001, 1e9,
                            "check the memory estimate against this many GiB instead of the "
                            "measured free memory: per device with --device cuda, else the "
                            "host's, shared by its ranks (to plan for a smaller machine, or to "
                            "leave room for other processes)")),
        bool_flag("profile",
                  "print the host time of each tensor op per step at the end (rank 0; the first "
                  "step and evaluations left out)"),
         })
      c.flags.push_back(m);
    c.epilog =
        "At the end of the run: the final checkpoint (with --ckpt-dir), then a validation pass of\n"
        "--final-eval-tokens (default --eval-tokens; 0 skips it) and, with --core-every, the CORE\n"
        "score. SIGUSR1/SIGTERM save the last completed step and exit 75 (resume: --resume auto).\n\n" +
        model_choices_help();
    return c;
  }();
  return spec;
}

std::string train_usage() { return usage(train_command()); }

absl::StatusOr<TrainOptions> parse_train_options(int argc, char** argv, int first) {
  std::vector<std::string> args(argv + first, argv + argc);
  std::vector<std::string> from_recipe;
  VT_ASSIGN_OR_RETURN(args, expand_recipe(args, &from_recipe));
  VT_ASSIGN_OR_RETURN(Flags f, Flags::parse(train_command(), args));
  TrainOptions o;
  o.recipe = f.get_string("recipe");
  o.recipe_flags = from_recipe;
  VT_ASSIGN_OR_RETURN(o.data, data::parse_data_spec(f.get_string("data"),
                                                    f.has("data-stage") ? f.get_list("data-stage")
                                                                        : std::vector<std::string>{}));
  VT_RETURN_IF_ERROR(data::check_same_tokenizer(o.data));
  o.data_dir = o.data.sources.front().dir;
  VT_ASSIGN_OR_RETURN(ModelConfig m, model_config_from_flags(f));
  // Vocabulary from the data directory's tokenizer.
  VT_ASSIGN_OR_RETURN(auto tok, data::load_tokenizer(o.data_dir));
  m.vocab_size = tok->vocab_size();
  VT_RETURN_IF_ERROR(m.finalize());
  o.model = m;

  o.tp = static_cast<int>(f.get_int("tp"));
  o.pp = static_cast<int>(f.get_int("pp"));
  o.vpp = static_cast<int>(f.get_int("vpp"));
  // The micro-batch count (a multiple of pp) is checked once the layout is known (Trainer).
  VT_RETURN_IF_ERROR(check_virtual_stages(o.model.n_layer, o.pp, o.vpp, -1));
  o.micro_batch = static_cast<int>(f.get_int("micro-batch"));
  o.global_batch = f.get_int("global-batch");
  o.steps = f.get_int("steps");
  o.eval_every = f.get_int("eval-every");
  o.eval_tokens = f.get_int("eval-tokens");
  o.final_eval_tokens = f.has("final-eval-tokens") ? f.get_int("final-eval-tokens") : o.eval_tokens;
  o.ckpt_dir = f.get_string("ckpt-dir");
  o.ckpt_every = f.get_int("ckpt-every");
  o.keep_last = static_cast<int>(f.get_int("keep-last"));
  o.stop_at_step = f.get_int("stop-at-step");
  o.resume = f.get_string("resume");
  o.metrics_path = f.get_string("metrics");
  o.tensorboard_dir = f.get_string("tensorboard");
  o.seed = static_cast<uint64_t>(f.get_int("seed"));
  // --reparam-init orth draws W0 from the run seed; the config keeps it (checkpoints, decoding).
  if (o.model.reparam_init == "orth") o.model.reparam_seed = o.seed;
  o.matrix_lr = f.get_double("matrix-lr");
  o.scalar_lr = f.get_double("scalar-lr");
  o.gain_lr = f.get_double("gain-lr");
  o.lr_scale = f.get_double("lr-scale");
  o.warmup_steps = f.get_int("warmup");
  if (f.has("warmup-frac")) {
    if (f.has("warmup"))
      return absl::InvalidArgumentError(
          "--warmup and --warmup-frac both set the warmup; give one of them (--recipe official "
          "sets --warmup-frac: override it with --warmup-frac)");
    o.warmup_steps = static_cast<int64_t>(std::ceil(f.get_double("warmup-frac") * o.steps));
  }
  o.warmdown_frac = f.get_double("warmdown");
  o.final_lr_frac = f.get_double("final-lr-frac");
  o.max_grad_norm = f.get_double("max-grad-norm");
  o.optimizer = f.get_string("optimizer");
  if (o.optimizer == "adamw") {
    for (const char* muon_only : {"matrix-lr", "scalar-lr", "gain-lr", "muon-ns-dtype", "muon-wd",
                                  "muon-wd-style", "muon-wd-scale", "muon-momentum",
                                  "lr-batch-scale"})
      if (f.has(muon_only))
        return absl::InvalidArgumentError(absl::StrCat(
            "--", muon_only, " applies to --optimizer muon; --optimizer adamw trains every "
            "parameter at --adamw-lr"));
    if (f.get_bool("polar-express"))
      return absl::InvalidArgumentError(
          "--polar-express applies to --optimizer muon (Muon's Newton-Schulz); --optimizer adamw "
          "has no Muon");
    if (f.has("adamw-lr")) o.adamw_lr = f.get_double("adamw-lr");
    if (f.has("weight-decay")) o.weight_decay = f.get_double("weight-decay");
  } else {
    for (const char* adamw_only : {"adamw-lr", "weight-decay"})
      if (f.has(adamw_only))
        return absl::InvalidArgumentError(absl::StrCat(
            "--", adamw_only, " applies to --optimizer adamw; --optimizer ", o.optimizer,
            " takes --matrix-lr, --scalar-lr, --gain-lr (docs/model.md \"Optimizer groups\")"));
  }
  o.log_every = f.get_int("log-every");
  o.health_every = f.get_int("health-every");
  o.straggler_margin = f.get_double("straggler-margin");
  o.straggler_min_s = f.get_double("straggler-min-s");
  o.sample_every = f.get_int("sample-every");
  o.polar_express = f.get_bool("polar-express");
  o.muon_wd = f.get_double("muon-wd");
  o.muon_wd_style = f.get_string("muon-wd-style");
  o.muon_wd_scale = f.get_string("muon-wd-scale");
  o.muon_momentum = f.get_string("muon-momentum");
  o.lr_batch_scale = f.get_string("lr-batch-scale");
  o.coef_optim = f.get_string("coef-optim");
  for (const char* flag : {"muon-wd-style", "muon-wd-scale"})
    if (o.muon_wd == 0 && f.get_string(flag) == "nanochat")
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " nanochat shapes Muon's weight decay, and --muon-wd is 0 (give the "
          "decay, e.g. --muon-wd 0.28 as nanochat does)"));
  if (o.muon_wd_scale == "nanochat") {
    if (auto s = nanochat_wd_scale(o.model, 524288); !s.ok()) return s.status();
  }
  VT_ASSIGN_OR_RETURN(o.recompute, parse_recompute(f.get_string("recompute")));
  o.fp8 = f.get_string("fp8");
  o.table_offload = f.get_bool("table-offload");
  if (o.table_offload && !o.model.value().has_table())
    return absl::InvalidArgumentError(absl::StrCat(
        "--table-offload keeps value tables in host memory, and --value-mode ",
        o.model.value().name(), " has none (bov, bov-add and value-embed do)"));
  o.overlap_grad_sync = !f.get_bool("no-overlap-grad-sync");
  o.grad_sync = f.get_string("grad-sync");
  o.cuda_graphs = f.get_string("cuda-graphs");
  o.zero = static_cast<int>(f.get_int("zero"));
  o.skip_memory_check = f.get_bool("skip-memory-check");
  if (f.has("memory-limit-gib")) o.memory_limit_gib = f.get_double("memory-limit-gib");
  o.async_save = f.get_bool("async-save");
  o.allow_other_data = f.get_bool("allow-other-data");
  o.profile = f.get_bool("profile");
  o.on_nonfinite = f.get_string("on-nonfinite");
  o.max_nonfinite_steps = f.get_int("max-nonfinite-steps");
  o.device = f.get_string("device");
  o.act_dtype = f.get_string("act-dtype");
  if (o.act_dtype.empty()) o.act_dtype = o.device == "cpu" ? "f32" : "bf16";
  o.muon_ns_dtype = f.get_string("muon-ns-dtype");
  if (o.muon_ns_dtype.empty()) o.muon_ns_dtype = o.device == "cuda" ? "bf16" : "f32";
  o.device_comm = f.get_string("device-comm");
  o.core_every = f.get_int("core-every");
  o.core_max_per_task = f.get_int("core-max-per-task");
  o.core_dir = f.get_string("core");
  if (o.core_every > 0 && o.core_dir.empty())
    return absl::InvalidArgumentError("--core-every needs --core BUNDLE_DIR (the CORE eval bundle)");
  if (o.core_every == 0 && !o.core_dir.empty())
    return absl::InvalidArgumentError("--core BUNDLE_DIR is used only with --core-every N");
  // --global-batch 0 (the default) means one micro-batch per data-parallel rank; the trainer
  // fills it in once it knows the layout.
  if (o.global_batch > 0 && o.global_batch % o.tokens_per_micro() != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o.global_batch, " tokens is not a multiple of micro-batch x seq-len = ",
        o.tokens_per_micro()));
  if (o.global_batch > 0) {
    // Derived: the tokens of the whole run, in 64 bits (micro-batches per step need the
    // data-parallel size: Trainer::setup).
    if (o.global_batch > kMaxRunTokens / o.steps)
      return absl::InvalidArgumentError(absl::StrCat(
          "--steps ", o.steps, " x --global-batch ", o.global_batch,
          " tokens is more than vtrain's limit of ", kMaxRunTokens,
          " (2^60) tokens per run; lower one of them"));
  }
  if (!o.ckpt_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(o.ckpt_dir, ec) && !std::filesystem::is_directory(o.ckpt_dir, ec))
      return absl::InvalidArgumentError(
          absl::StrCat("--ckpt-dir ", o.ckpt_dir, " exists and is not a directory"));
  }
  if (o.resume == "auto" && o.ckpt_dir.empty())
    return absl::InvalidArgumentError("--resume auto needs --ckpt-dir");
  if (o.resume != "none" && o.resume != "auto") {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.resume, ec))
      return absl::NotFoundError(absl::StrCat("--resume ", o.resume,
                                              ": no such checkpoint file (use auto, none or a path)"));
  }
  if (o.stop_at_step > 0 && o.stop_at_step >= o.steps)
    return absl::InvalidArgumentError(absl::StrCat("--stop-at-step ", o.stop_at_step,
                                                   " is not before the last step (--steps ", o.steps,
                                                   "); the run ends there anyway"));
  return o;
}

}  // namespace vt
