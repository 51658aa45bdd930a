// The settings table of `vtrain train` and what is generated from it (see settings.h). To add a
// setting: a field in TrainOptions (train/options.h) and one row here.
#include "train/settings.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace vt {

namespace {

// Where a row's value goes in the saved options JSON, and whether a change on resume is noted.
struct Saved {
  std::string key;
  bool noted = false;
};
Saved saved(const char* key) { return {key, false}; }
Saved noted(const char* key) { return {key, true}; }

// A row whose flag fills `field` as it is typed (bool, integer, number, text). A flag without a
// default (no_default) leaves the field's own default unless given.
template <class T>
TrainSetting bind(FlagSpec flag, T TrainOptions::*field, Saved s = {}) {
  const std::string name = flag.name;
  const bool always = flag.type == FlagType::kBool || !flag.def.empty();
  TrainSetting row{std::move(flag), s.key, s.noted};
  row.read = [name, field, always](const Flags& f, TrainOptions& o) {
    if (!always && !f.has(name)) return;
    if constexpr (std::is_same_v<T, bool>) o.*field = f.get_bool(name);
    else if constexpr (std::is_integral_v<T>) o.*field = static_cast<T>(f.get_int(name));
    else if constexpr (std::is_floating_point_v<T>) o.*field = f.get_double(name);
    else o.*field = f.get_string(name);
  };
  if (!s.key.empty()) row.save = [field](const TrainOptions& o) { return nlohmann::json(o.*field); };
  return row;
}

// An enumerated option: its values and their spellings (the flag's choices, in this order).
template <class E>
using Spellings = std::vector<std::pair<E, std::string>>;

template <class E>
const std::string& spelling(const Spellings<E>& names, E e) {
  for (const auto& [v, n] : names)
    if (v == e) return n;
  VT_CHECK_MSG(false, "an enumerated option's value has no spelling");
  return names.front().second;
}

// A row whose choice flag fills an enumerated field; `def` nullptr: no default (the field's own
// unless given; parse_train_options resolves it).
template <class E>
TrainSetting choose(const std::string& name, const E* def, Spellings<E> names,
                    E TrainOptions::*field, const std::string& help, Saved s = {}) {
  std::vector<std::string> choices;
  for (const auto& [v, n] : names) choices.push_back(n);
  TrainSetting row{choice_flag(name, def ? spelling(names, *def) : "", choices, help), s.key,
                   s.noted};
  row.read = [name, names, field, always = def != nullptr](const Flags& f, TrainOptions& o) {
    if (!always && !f.has(name)) return;
    const std::string v = f.get_string(name);
    for (const auto& [e, n] : names)
      if (n == v) {
        o.*field = e;
        return;
      }
    VT_CHECK_MSG(false, "--" << name << " " << v << " passed the flag's choices but has no value");
  };
  if (!s.key.empty())
    row.save = [names, field](const TrainOptions& o) { return nlohmann::json(spelling(names, o.*field)); };
  return row;
}
template <class E>
TrainSetting choose(const std::string& name, E def, Spellings<E> names, E TrainOptions::*field,
                    const std::string& help, Saved s = {}) {
  return choose(name, &def, std::move(names), field, help, std::move(s));
}

// A flag without a field of its own (parse_train_options reads it), or a heading.
TrainSetting flag_only(FlagSpec flag) { return TrainSetting{std::move(flag)}; }
TrainSetting heading(const char* title) { return flag_only(flag_heading(title)); }

// A row that applies only under one --optimizer.
TrainSetting muon_only(TrainSetting row) {
  row.only_with = OptimizerKind::kMuon;
  return row;
}
TrainSetting adamw_only(TrainSetting row) {
  row.only_with = OptimizerKind::kAdamW;
  return row;
}

const Spellings<DType> kDTypes = {{DType::kF32, "f32"}, {DType::kBF16, "bf16"}};
const Spellings<DType> kWireDTypes = {{DType::kF32, "fp32"}, {DType::kBF16, "bf16"}};
const Spellings<NanochatScale> kNanochatScales = {{NanochatScale::kNone, "none"},
                                                  {NanochatScale::kNanochat, "nanochat"}};

Spellings<Recompute> recompute_spellings() {
  Spellings<Recompute> out;
  for (const std::string& n : recompute_names()) out.push_back({*parse_recompute(n), n});
  return out;
}

std::vector<TrainSetting> make_table() {
  using O = TrainOptions;
  return {
      heading("layout"),
      bind(int_flag("tp", 1, 1, 1 << 20, "tensor-parallel ranks"), &O::tp, saved("tp")),
      bind(int_flag("pp", 1, 1, 1 << 20, "pipeline stages (dp = ranks / (tp*pp))"), &O::pp,
           saved("pp")),
      bind(int_flag("vpp", 1, 1, 1 << 20,
                    "model chunks (virtual stages) per pipeline rank: Megatron's interleaved 1F1B, "
                    "bubble (pp-1)/(vpp*micro-batches); needs --pp > 1, vpp dividing the layers per "
                    "stage and micro-batches per step a multiple of pp"),
           &O::vpp, saved("vpp")),
      heading("batch"),
      bind(int_flag("micro-batch", 4, 1, 1 << 24, "rows of T tokens per forward/backward"),
           &O::micro_batch, saved("micro_batch")),
      bind(int_flag("global-batch", 0, 0, 1e15,
                    "tokens per optimizer step, a multiple of micro-batch x T x dp (0: one micro-batch per dp rank)"),
           &O::global_batch, noted("global_batch")),
      heading("schedule"),
      bind(int_flag("steps", 100, 1, 1e12, "optimizer steps"), &O::steps, saved("steps")),
      muon_only(bind(num_flag("matrix-lr", 0.02, 0, 1e3, "Muon's peak learning rate"), &O::matrix_lr,
                     noted("matrix_lr"))),
      muon_only(bind(num_flag("scalar-lr", 0.5, 0, 1e3,
                              "AdamW peak lr of the scalar group: value-mode gains and lambdas, DenseFormer "
                              "weights, logits (docs/model.md)"),
                     &O::scalar_lr, noted("scalar_lr"))),
      muon_only(bind(num_flag("gain-lr", 0.01, 0, 1e3,
                              "AdamW peak lr of the block shapes' gains (vskipinit, sas, sas-p)"),
                     &O::gain_lr, noted("gain_lr"))),
      choose("coef-optim", CoefOptim::kPaper,
             {{CoefOptim::kPaper, "paper"}, {CoefOptim::kVtrain, "vtrain"}}, &O::coef_optim,
             "paper: each value path's and DenseFormer's coefficients as its paper's code "
             "trains them (BoV's gains betas 0.96/0.95, bov-add's a at --scalar-lr x 0.01 "
             "with wd 0.05; ResFormer's lambdas and DenseFormer's weights at --matrix-lr, "
             "betas 0.9/0.95); vtrain: all at --scalar-lr, betas 0.8/0.95 (docs/model.md)",
             saved("coef_optim")),
      muon_only(choose("lr-batch-scale", NanochatScale::kNone, kNanochatScales, &O::lr_batch_scale,
                       "nanochat: every group's peak lr but the smear gate's and the gains' x "
                       "sqrt(global batch / 2^19), as nanochat's base_train scales them",
                       saved("lr_batch_scale"))),
      bind(num_flag("lr-scale", 1.0, 0, 1e6, "multiplies every group's peak learning rate"),
           &O::lr_scale, noted("lr_scale")),
      bind(int_flag("warmup", 40, 0, 1e12, "linear warmup steps"), &O::warmup_steps,
           noted("warmup_steps")),
      bind(num_flag("warmdown", 0.65, 0, 1, "fraction of the steps in the final linear decay"),
           &O::warmdown_frac, noted("warmdown_frac")),
      flag_only(no_default(num_flag("warmup-frac", 0, 0, 1,
                                    "linear warmup as a fraction of --steps, rounded up (instead of --warmup)"))),
      bind(num_flag("final-lr-frac", 0.05, 0, 1, "lr multiplier reached at the end of the warmdown"),
           &O::final_lr_frac, noted("final_lr_frac")),
      bind(num_flag("max-grad-norm", 0, 0, 1e12, "clip the global gradient norm (0: off)"),
           &O::max_grad_norm, noted("max_grad_norm")),
      choose("optimizer", OptimizerKind::kMuon,
             {{OptimizerKind::kMuon, "muon"}, {OptimizerKind::kAdamW, "adamw"}}, &O::optimizer,
             "muon: Muon for the block matrices, AdamW groups for the rest (docs/model.md); "
             "adamw: one AdamW for every parameter (--adamw-lr, --weight-decay)",
             saved("optimizer")),
      adamw_only(bind(no_default(num_flag("adamw-lr", 1e-3, 1e-12, 1e3,
                                          "--optimizer adamw: the peak lr of every parameter (default 0.001)")),
           &O::adamw_lr, noted("adamw_lr"))),
      adamw_only(bind(no_default(num_flag("weight-decay", 0.1, 0, 10,
                                          "--optimizer adamw: decoupled weight decay of all but the gains and "
                                          "scalars (default 0.1)")),
           &O::weight_decay, noted("weight_decay"))),
      muon_only(bind(bool_flag("polar-express", "Polar Express coefficients for Newton-Schulz"),
                     &O::polar_express, noted("polar_express"))),
      muon_only(bind(num_flag("muon-wd", 0, 0, 1e3, "Muon's weight decay (decoupled, times the lr)"),
                     &O::muon_wd, noted("muon_wd"))),
      muon_only(choose("muon-wd-style", optim::MuonWdStyle::kDecoupled,
                       {{optim::MuonWdStyle::kDecoupled, "decoupled"}, {optim::MuonWdStyle::kNanochat, "nanochat"}},
                       &O::muon_wd_style,
                       "nanochat: cautious decay (only where update and weight agree in sign), "
                       "times Muon's aspect scale, on a cosine to 0 over the run (docs/model.md)",
                       noted("muon_wd_style"))),
      muon_only(choose("muon-wd-scale", NanochatScale::kNone, kNanochatScales, &O::muon_wd_scale,
                       "nanochat: --muon-wd x sqrt(global batch / 2^19) x (d12's scaling params / "
                       "this model's), as nanochat's base_train scales its 0.28",
                       noted("muon_wd_scale"))),
      muon_only(choose("muon-momentum", optim::MomentumSchedule::kWarmup,
                       {{optim::MomentumSchedule::kWarmup, "warmup"},
                        {optim::MomentumSchedule::kNanochat, "nanochat"}},
                       &O::muon_momentum,
                       "warmup: 0.85 -> 0.95 over 300 steps; nanochat: 0.85 -> 0.97 over 400 steps, "
                       "then down to 0.90 across the lr warmdown",
                       noted("muon_momentum"))),
      heading("non-finite values"),
      choose("on-nonfinite", OnNonfinite::kStop,
             {{OnNonfinite::kStop, "stop"}, {OnNonfinite::kSkipStep, "skip-step"}},
             &O::on_nonfinite,
             "a non-finite loss or gradient norm: stop naming where it appeared, or discard "
             "that step's update"),
      bind(int_flag("max-nonfinite-steps", 3, 1, 1e6,
                    "with skip-step: stop after this many non-finite steps in a row"),
           &O::max_nonfinite_steps),
      heading("evaluation"),
      bind(int_flag("eval-every", 0, 0, 1e12, "validation loss every N steps (0: only at the end)"),
           &O::eval_every, saved("eval_every")),
      bind(int_flag("eval-tokens", 65536, 1, 1e12, "validation tokens per evaluation"),
           &O::eval_tokens, saved("eval_tokens")),
      bind(no_default(int_flag("final-eval-tokens", 0, 0, 1e12,
                               "validation tokens of the evaluation after the last step (default: "
                               "--eval-tokens; 0: no final evaluation)")),
           &O::final_eval_tokens, saved("final_eval_tokens")),
      bind(int_flag("sample-every", 0, 0, 1e12, "a short greedy sample every N steps (one CPU rank)"),
           &O::sample_every),
      bind(int_flag("core-every", 0, 0, 1e12, "the DCLM CORE score every N steps and at the end"),
           &O::core_every, saved("core_every")),
      bind(text_flag("core", "", "the CORE eval bundle directory (nanochat's eval_bundle)"),
           &O::core_dir, saved("core_dir")),
      bind(int_flag("core-max-per-task", 500, -1, 1e9, "CORE examples per task (-1: all)"),
           &O::core_max_per_task),
      heading("output"),
      bind(text_flag("ckpt-dir", "", "checkpoint directory (one run at a time)"), &O::ckpt_dir),
      bind(int_flag("ckpt-every", 0, 0, 1e12, "save every N steps (0: only at the end)"),
           &O::ckpt_every),
      bind(int_flag("keep-last", 3, 0, 1e6, "checkpoints kept (0: all)"), &O::keep_last),
      bind(bool_flag("async-save",
                     "write checkpoints in the background: training pauses only to copy the state to "
                     "host memory (which needs that memory once more)"),
           &O::async_save),
      bind(text_flag("resume", "none", "auto (the newest good checkpoint of --ckpt-dir), PATH or none"),
           &O::resume),
      bind(bool_flag("allow-other-data",
                     "resume even when --data is not the data the checkpoint was trained on (its "
                     "data fingerprint: tokenizer and training shards); the loader continues at "
                     "the checkpoint's position"),
           &O::allow_other_data),
      bind(text_flag("metrics", "", "metrics JSON lines file"), &O::metrics_path),
      bind(text_flag("tensorboard", "",
                     "also write every metric as TensorBoard scalars (and the configuration as "
                     "text) into event files in this directory (rank 0)"),
           &O::tensorboard_dir),
      bind(int_flag("stop-at-step", 0, 0, 1e12, "save and exit 75 after step N, as on SIGUSR1"),
           &O::stop_at_step),
      bind(int_flag("seed", 1337, 0, 9.2e18, "initialization and data order"), &O::seed,
           noted("seed")),
      bind(int_flag("log-every", 1, 1, 1e12, "progress line every N steps"), &O::log_every),
      bind(int_flag("health-every", 50, 0, 1e9,
                    "every N steps gather each rank's compute, communication wait and data time "
                    "and name stragglers (0: never)"),
           &O::health_every),
      bind(num_flag("straggler-margin", 0.2, 0, 100,
                    "a rank whose compute per step is above the median by this fraction (and "
                    "--straggler-min-s) is a straggler"),
           &O::straggler_margin),
      bind(num_flag("straggler-min-s", 0.02, 0, 1e6,
                    "seconds per step above the median a straggler must also be"),
           &O::straggler_min_s),
      heading("device"),
      choose("device", RunDevice::kCPU,
             {{RunDevice::kCPU, "cpu"}, {RunDevice::kCUDA, "cuda"}, {RunDevice::kEmulated, "emulated"}},
             &O::device,
             "cuda: one GPU per rank; emulated: the device code path on the CPU, for tests",
             saved("device")),
      choose<DType>("act-dtype", nullptr, kDTypes, &O::act_dtype,
                    "activations (default bf16 off the CPU, f32 on it)", saved("act_dtype")),
      choose("device-comm", DeviceComm::kAuto,
             {{DeviceComm::kAuto, "auto"}, {DeviceComm::kNccl, "nccl"}, {DeviceComm::kMpi, "mpi"}},
             &O::device_comm, "how device tensors cross ranks (mpi stages through host memory)",
             saved("device_comm")),
      muon_only(choose<DType>("muon-ns-dtype", nullptr, kDTypes, &O::muon_ns_dtype,
                              "Newton-Schulz dtype (default bf16 on cuda)", saved("muon_ns_dtype"))),
      choose("recompute", Recompute::kOff, recompute_spellings(), &O::recompute,
             "what backward reruns instead of keeping it: attn (the attention core), mlp "
             "(the MLP activation), block (all but each block's input)",
             saved("recompute")),
      bind(choice_flag("fp8", "off", {"off", "e4m3"},
                       "e4m3: the blocks' linear GEMMs in FP8 (E4M3 activations and weights, E5M2 "
                       "gradients, per-tensor current scaling; lm head and attention stay bf16); "
                       "on the CPU a fake quantization: the same numerics, no speed"),
           &O::fp8, noted("fp8")),
      bind(bool_flag("table-offload",
                     "keep the value tables (bov, bov-add, value-embed) and their AdamW states in "
                     "host memory; only the rows a step reads go to the device"),
           &O::table_offload, saved("table_offload")),
      TrainSetting{bool_flag("no-overlap-grad-sync", "sum data-parallel gradients after backward, not during it"),
                   "", false, std::nullopt,
                   [](const Flags& f, TrainOptions& o) {
                     o.overlap_grad_sync = !f.get_bool("no-overlap-grad-sync");
                   }},
      bind(choice_flag("cuda-graphs", "off", {"off", "micro-step", "step"},
                       "micro-step: replay each micro-batch's forward + backward from a CUDA graph "
                       "after an eager first step; step: the optimizer step too, its norm, clip and "
                       "finite check on the device (--device cuda, one GPU, no pipeline, tensor or "
                       "data parallelism, no --table-offload or --profile)"),
           &O::cuda_graphs, saved("cuda_graphs")),
      choose("grad-sync", DType::kF32, kWireDTypes, &O::grad_sync,
             "the data-parallel gradient sum's wire format: bf16 sends half the bytes "
             "(each rank's gradient rounded to bf16, every addition done in fp32 and "
             "rounded to bf16; also rounds with dp 1)",
             noted("grad_sync")),
      bind(int_flag("zero", 1, 1, 2,
                    "ZeRO stage of the data-parallel optimizer: 1 all-reduces the gradients, 2 "
                    "reduce-scatters them into the ranks that own their optimizer states (half "
                    "the bytes; the wire is --grad-sync's)"),
           &O::zero, noted("zero")),
      bind(bool_flag("skip-memory-check",
                     "start even when the memory estimate exceeds the free host/device memory"),
           &O::skip_memory_check),
      bind(no_default(num_flag("memory-limit-gib", 0, 0.001, 1e9,
                               "check the memory estimate against this many GiB instead of the "
                               "measured free memory: per device with --device cuda, else the "
                               "host's, shared by its ranks (to plan for a smaller machine, or to "
                               "leave room for other processes)")),
           &O::memory_limit_gib),
      bind(bool_flag("profile",
                     "print the host time of each tensor op per step at the end (rank 0; the first "
                     "step and evaluations left out)"),
           &O::profile),
  };
}

}  // namespace

const std::vector<TrainSetting>& train_settings() {
  static const std::vector<TrainSetting> table = make_table();
  return table;
}

const TrainSetting& train_setting(const std::string& name) {
  for (const TrainSetting& s : train_settings())
    if (s.flag.name == name) return s;
  VT_CHECK_MSG(false, "no setting --" << name);
  return train_settings().front();
}

void read_train_settings(const Flags& f, TrainOptions& o) {
  for (const TrainSetting& s : train_settings())
    if (s.read) s.read(f, o);
}

nlohmann::json saved_train_settings(const TrainOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  for (const TrainSetting& s : train_settings())
    if (!s.saved_as.empty()) j[s.saved_as] = s.save(o);
  return j;
}

std::string changed_on_resume(const nlohmann::json& saved, const nlohmann::json& now) {
  std::string changed;
  if (!saved.is_object()) return changed;
  for (const TrainSetting& s : train_settings()) {
    if (!s.noted_on_resume) continue;
    const std::string& k = s.saved_as;
    const auto a = saved.find(k);
    if (a == saved.end() || !now.contains(k) || *a == now[k]) continue;
    absl::StrAppend(&changed, changed.empty() ? "" : ", ", k, " ", a->dump(), " -> ", now[k].dump());
  }
  return changed;
}

// TrainOptions as JSON (train/options.h): the table's saved rows and the data sources.
nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = saved_train_settings(*this);
  nlohmann::json sources = nlohmann::json::array();
  if (data.is_mixture())
    for (size_t k = 0; k < data.sources.size(); ++k)
      sources.push_back({{"name", data.sources[k].name}, {"dir", data.sources[k].dir},
                         {"weight", data.stages[0].weights[k]}});
  j["data_dir"] = data_dir;
  j["data_sources"] = sources;
  return j;
}

}  // namespace vt
