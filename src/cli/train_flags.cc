// The flag table of `vtrain train` (--data and --recipe here, the model flags cli/model_flags.cc's,
// the run's settings train/settings.cc's) and its parsing into TrainOptions (train/options.h):
// each setting's field from its table row, then the rules that tie several together.
#include "cli/train_flags.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/config_file.h"
#include "cli/model_flags.h"
#include "cli/recipes.h"
#include "train/settings.h"
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
        no_default(text_flag("config", "",
                             "a TOML run config file whose keys are these flags (docs/usage.md "
                             "\"Config files\"); flags given here win over it")),
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
    for (const TrainSetting& s : train_settings()) c.flags.push_back(s.flag);
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
  // A --config file's flags, but those the command line gives (cli/config_file.h).
  if (const std::string path = config_path_in(args); !path.empty()) {
    VT_ASSIGN_OR_RETURN(std::vector<std::string> from_file,
                        config_file_args(train_command(), path, flags_given(args)));
    args.insert(args.end(), from_file.begin(), from_file.end());
  }
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

  read_train_settings(f, o);
  // The micro-batch count (a multiple of pp) is checked once the layout is known (Trainer).
  VT_RETURN_IF_ERROR(check_virtual_stages(o.model.n_layer, o.pp, o.vpp, -1));
  if (!f.has("final-eval-tokens")) o.final_eval_tokens = o.eval_tokens;
  // --reparam-init orth draws W0 from the run seed; the config keeps it (checkpoints, decoding).
  if (o.model.reparam_init == "orth") o.model.reparam_seed = o.seed;
  if (f.has("warmup-frac")) {
    if (f.has("warmup"))
      return absl::InvalidArgumentError(
          "--warmup and --warmup-frac both set the warmup; give one of them (--recipe official "
          "sets --warmup-frac: override it with --warmup-frac)");
    o.warmup_steps = static_cast<int64_t>(std::ceil(f.get_double("warmup-frac") * o.steps));
  }
  // Flags of the other optimizer (the table's muon_only / adamw_only rows).
  for (const TrainSetting& s : train_settings()) {
    if (!s.only_with || *s.only_with == o.optimizer || !f.has(s.flag.name)) continue;
    const std::string& name = s.flag.name;
    if (name == "polar-express")
      return absl::InvalidArgumentError(
          "--polar-express applies to --optimizer muon (Muon's Newton-Schulz); --optimizer adamw "
          "has no Muon");
    return absl::InvalidArgumentError(
        *s.only_with == OptimizerKind::kMuon
            ? absl::StrCat("--", name, " applies to --optimizer muon; --optimizer adamw trains "
                           "every parameter at --adamw-lr")
            : absl::StrCat("--", name, " applies to --optimizer adamw; --optimizer ",
                           f.get_string("optimizer"),
                           " takes --matrix-lr, --scalar-lr, --gain-lr (docs/model.md "
                           "\"Optimizer groups\")"));
  }
  for (const auto& [flag, nanochat] :
       {std::pair{"muon-wd-style", o.muon_wd_style == optim::MuonWdStyle::kNanochat},
        std::pair{"muon-wd-scale", o.muon_wd_scale == NanochatScale::kNanochat}})
    if (o.muon_wd == 0 && nanochat)
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " nanochat shapes Muon's weight decay, and --muon-wd is 0 (give the "
          "decay, e.g. --muon-wd 0.28 as nanochat does)"));
  if (o.muon_wd_scale == NanochatScale::kNanochat) {
    if (auto s = nanochat_wd_scale(o.model, 524288); !s.ok()) return s.status();
  }
  if (o.table_offload && !o.model.value().has_table())
    return absl::InvalidArgumentError(absl::StrCat(
        "--table-offload keeps value tables in host memory, and --value-mode ",
        o.model.value().name(), " has none (bov, bov-add and value-embed do)"));
  // Defaults that depend on the device.
  if (!f.has("act-dtype")) o.act_dtype = o.device == RunDevice::kCPU ? DType::kF32 : DType::kBF16;
  if (!f.has("muon-ns-dtype"))
    o.muon_ns_dtype = o.device == RunDevice::kCUDA ? DType::kBF16 : DType::kF32;
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
