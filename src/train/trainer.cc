// The training run (see trainer.h).
#include "train/trainer.h"
#include "model/model_split.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_dir.h"
#include "core/backend.h"
#include "core/blas_info.h"
#include "core/op_profile.h"
#include "core/ops.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "data/mixture.h"
#include "data/data_fingerprint.h"
#include "eval/core_eval.h"
#include "model/flops.h"
#include "parallel/comm_watchdog.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "train/evaluate.h"
#include "train/graph_micro_steps.h"
#include "train/graph_optimizer_step.h"
#include "train/optimizer_setup.h"
#include "plan/memory_estimate.h"
#include "train/preflight.h"
#include "train/settings.h"

namespace vt {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Bytes the device backend holds now and at most (0 on the CPU).
double device_bytes() {
  return has_backend(Device::kCUDA) ? static_cast<double>(backend(Device::kCUDA).bytes_in_use()) : 0.0;
}
double device_peak_bytes() {
  return has_backend(Device::kCUDA) ? static_cast<double>(backend(Device::kCUDA).peak_bytes()) : 0.0;
}

// Gradients of parameters replicated over the pipeline are summed over it; then the
// data-parallel sum (grad_scale already divides by the global batch) is finished: the layers'
// sums were started during backward (OverlappedGradSync), the rest goes now.
// With --zero 2 the data-parallel sum is the optimizer's reduce into the owners: started during
// backward by the hooks, the rest and the wait here.
void sync_gradients(ParamStore& store, const ProcessGrid& grid, optim::OverlappedGradSync& dp_sync,
                    optim::DistributedOptimizer& opt, DType wire) {
  if (grid.shape().pp > 1)
    for (int i = 0; i < store.size(); ++i)
      if (store.info(i).pp_replicated) {
        Tensor g = store.grad(i);
        grid.pp()->all_reduce_sum(g);
      }
  if (opt.zero_stage() == 2)
    opt.reduce_grads(wire);
  else
    dp_sync.finish();
}

// Set by SIGUSR1/SIGTERM (Slurm's warning before the time limit, scancel, mpirun forwarding
// its own SIGTERM): the run saves the last completed step and stops with kExitRequeue.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int stop_signal_received() { return g_stop_signal; }

Trainer::Trainer(const TrainOptions& options, Communicator* world)
    : o_(options), world_(world), rank0_(world->rank() == 0) {}

Trainer::~Trainer() = default;

absl::Status Trainer::setup() {
  t_setup_ = now_seconds();
  VT_ASSIGN_OR_RETURN(run_, build_run(o_, world_));
  run_->engine->set_stop_check([] { return stop_signal_received() != 0; });
  VT_ASSIGN_OR_RETURN(slow_, SlowRank::from_env());
  if (slow_.rank >= world_->size())
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "VTRAIN_INJECT_SLOW_RANK: rank ", slow_.rank, " is not a world rank (the run has ",
        world_->size(), " ranks)")));
  health_ = std::make_unique<RankHealth>(world_, static_cast<int>(o_.health_every),
                                         o_.straggler_margin, o_.straggler_min_s);
  VT_RETURN_IF_ERROR(resume());
  if (const auto* mix = dynamic_cast<const data::MixtureLoader*>(run_->train.get())) data_stage_ = mix->stage();
  if (!o_.ckpt_dir.empty() && rank0_) {
    VT_RETURN_IF_ERROR(run_->tokenizer->save((fs::path(o_.ckpt_dir) / "tokenizer.json").string()));
  }
  if (rank0_) {
    // The evaluations of the run before this invocation, for the summary's best val bpb.
    if (!resumed_from_.empty() && !o_.metrics_path.empty()) {
      evals_ = earlier_evaluations(o_.metrics_path, completed_step_);
      earlier_evals_ = static_cast<int64_t>(evals_.size());
    }
    VT_RETURN_IF_ERROR(metrics_.open(o_.metrics_path));
    if (!o_.tensorboard_dir.empty()) {
      // Steps after the checkpoint are this run's: TensorBoard drops what earlier files logged
      // from there on (a resume from an earlier checkpoint runs them again).
      VT_RETURN_IF_ERROR(metrics_.open_tensorboard(o_.tensorboard_dir, completed_step_ + 1,
                                                   o_.run_identity()));
      metrics_.tensorboard_text("config", "```\n" + o_.to_json().dump(1) + "\n```", completed_step_);
    }
  }
  print_banner();
  return absl::OkStatus();
}

absl::Status Trainer::resume() {
  const ModelConfig& cfg = o_.model;
  VT_ASSIGN_OR_RETURN(resumed_from_, resume_path(o_, *run_->grid));
  if (!resumed_from_.empty()) {
    VT_ASSIGN_OR_RETURN(CheckpointMeta meta,
                        load_training_state(resumed_from_, cfg, run_->store, *run_->opt, *run_->grid));
    if (meta.step > o_.steps)
      return agreed(absl::InvalidArgumentError(absl::StrCat(
          "--steps ", o_.steps, " is below the step of the checkpoint this run resumes (step ",
          meta.step, ", ", resumed_from_, "); --steps is the run's total: pass ", meta.step,
          " or more")));
    VT_RETURN_IF_ERROR(check_same_data(meta));
    completed_step_ = meta.step;
    last_saved_step_ = committed_step_ = meta.step;
    if (meta.extra.is_object() && meta.extra.contains("pending_eval_tokens") &&
        meta.extra["pending_eval_tokens"].is_number_integer() &&
        meta.extra["pending_eval_tokens"].get<int64_t>() > 0) {
      pending_eval_step_ = meta.step;
      pending_eval_tokens_ = meta.extra["pending_eval_tokens"].get<int64_t>();
    }
    tokens_seen_ = meta.tokens;
    VT_RETURN_IF_ERROR(run_->train->load_state_json(meta.loader_state));
    if (rank0_)
      for (const std::string& n : run_->train->resume_notes()) std::printf("data: %s\n", n.c_str());
  }
  loader_state_ = run_->train->state_json();
  return absl::OkStatus();
}

void Trainer::print_banner() const {
  if (!rank0_) return;
  const ModelConfig& cfg = o_.model;
  ParamStore whole;  // registration only: the whole model's parameter count
  GPT(cfg).register_params(whole);
  double whole_params = 0;
  for (const ParamInfo& p : whole.infos()) whole_params += static_cast<double>(p.numel());
  std::printf("model: %d layers, d=%d, %d heads (%d kv), T=%d, vocab %d | %.2fM params | "
              "block %s%s%s | value mode %s%s\n",
              cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.seq_len, cfg.vocab_size,
              whole_params / 1e6, block_shape_name(cfg.block), cfg.norm_none ? " (no norms)" : "",
              cfg.attn_bias.empty() ? "" : (" + " + cfg.attn_bias).c_str(),
              value_mode_name(cfg.value_mode), cfg.dense ? " + DenseFormer" : "");
  if (o_.recipe != "vtrain" || !o_.recipe_flags.empty())
    std::printf("recipe: %s%s%s\n", o_.recipe.c_str(), o_.recipe_flags.empty() ? "" : " set ",
                absl::StrJoin(o_.recipe_flags, " ").c_str());
  if (o_.muon_wd > 0 || o_.muon_momentum != optim::MomentumSchedule::kWarmup) {
    // The decay Muon starts with (after --muon-wd-scale), so nanochat's scaling can be read off.
    const optim::MuonConfig& mc = run_->opt->config().muon;
    std::printf("muon: weight decay %.6g (--muon-wd %g%s, %s) | momentum %s\n", mc.weight_decay,
                o_.muon_wd, o_.muon_wd_scale == NanochatScale::kNanochat ? " x nanochat's batch/horizon scale" : "",
                o_.muon_wd_style == optim::MuonWdStyle::kNanochat ? "cautious, cosine to 0, times the aspect scale"
                                               : "decoupled",
                o_.muon_momentum == optim::MomentumSchedule::kNanochat ? "0.85 -> 0.97 over 400 steps, to 0.90 in warmdown"
                                               : "0.85 -> 0.95 over 300 steps");
  }
  if (o_.lr_batch_scale == NanochatScale::kNanochat) {
    // base_train.py's batch factor is applied as the authors' code applies it, whatever the
    // batch; below 2^15 tokens a step it shrinks every scaled lr by more than 4x, which a short
    // run cannot recover from: say so, with the flag that keeps the reference lrs.
    const double b = lr_batch_scale(o_);
    std::printf("lr: every scaled group x%.4g (--lr-batch-scale nanochat: sqrt(%lld / 2^19))%s\n",
                b, static_cast<long long>(o_.global_batch),
                b < 0.25 ? "; at this small batch a short run barely trains: "
                           "--lr-batch-scale none keeps the recipe's reference lrs"
                         : "");
  }
  std::string layers;
  for (const auto& [b, e] : run_->chunks) absl::StrAppend(&layers, layers.empty() ? "" : ", ", b, "..", e - 1);
  std::printf("layout: %d ranks = dp %d x tp %d x pp %d%s | this stage: layers %s, %.2fM params\n",
              world_->size(), run_->shape.dp, run_->shape.tp, run_->shape.pp,
              o_.vpp > 1 ? absl::StrCat(" x vpp ", o_.vpp, " (interleaved 1F1B)").c_str() : "",
              layers.c_str(), static_cast<double>(run_->store.total_numel()) / 1e6);
  std::printf("batch: %lld tokens/step = %d rows x %d tokens x dp %d x %d micro-batches; %lld steps\n",
              static_cast<long long>(o_.global_batch), o_.micro_batch, cfg.seq_len, run_->shape.dp,
              run_->micro_batches, static_cast<long long>(o_.steps));
  if (o_.data.is_mixture()) {
    // The blend now and the stages to come (a line says when each starts).
    std::string later;
    for (size_t k = data_stage_ + 1; k < o_.data.stages.size(); ++k)
      absl::StrAppend(&later, "; stage ", k + 1, " from token ", o_.data.stages[k].start_tokens, ": ",
                      o_.data.describe_stage(k));
    std::printf("data: mixture, stage %zu of %zu: %s%s\n", data_stage_ + 1, o_.data.stages.size(),
                o_.data.describe_stage(data_stage_).c_str(), later.c_str());
  }
  std::printf("device: %s | communication: %s\n", run_->device.description.c_str(), run_->comm_desc.c_str());
  if (run_->shape.dp > 1 || o_.grad_sync != DType::kF32) {
    // The payload of the step's data-parallel all-reduces on this rank (the arena, padding and
    // parameters kept in host memory included).
    const double elems = static_cast<double>(run_->store.total_numel() + run_->store.host_numel());
    const bool bf16 = o_.grad_sync == DType::kBF16;
    std::printf("data-parallel gradient sum: %s%s wire, %.3f MB per step and rank%s\n",
                o_.zero == 2 ? "ZeRO-2 reduce-scatter into the optimizer's owners, " : "",
                bf16 ? "bf16" : "fp32", elems * (bf16 ? 2 : 4) / 1e6,
                bf16 ? absl::StrFormat(" (fp32: %.3f MB; rounded to bf16, fp32 additions)",
                                       elems * 4 / 1e6).c_str()
                     : "");
  }
  std::printf("%s\n", blas_description().c_str());
  std::printf("memory estimate (rank 0): %s\n", run_->memory_line.c_str());
  if (!resumed_from_.empty())
    std::printf("resumed from %s at step %lld\n", resumed_from_.c_str(),
                static_cast<long long>(completed_step_));
  std::fflush(stdout);
}

FetchBatch Trainer::fetch_from(data::BatchSource& loader) {
  const int64_t T = o_.model.seq_len, rows = run_->rows_per_micro;
  return [this, &loader, T, rows](int, int32_t* in, int32_t* tg) {
    const double t0 = now_seconds();
    absl::Status st = loader.next_batch_into(rows, T, run_->grid->coords().dp, run_->shape.dp, in, tg);
    if (!st.ok()) abort_job(std::string(st.message()));
    data_s_ += now_seconds() - t0;
  };
}

absl::Status Trainer::save(int64_t step) {
  op_profile::Pause no_profile;
  if (o_.ckpt_dir.empty() || step == last_saved_step_) return absl::OkStatus();
  run_->opt->sync_master_weights();  // --zero 2: the checkpoint holds the fp32 masters
  // Never a checkpoint of non-finite weights (an update can overflow even from finite
  // gradients): one reduction over the parameters, agreed by every rank.
  double sq = ops::sum_squares(run_->store.params_tensor());
  if (run_->store.has_host_params()) sq += ops::sum_squares(run_->store.host_params_tensor());
  world_->all_reduce_sum(&sq, 1);
  if (!std::isfinite(sq)) {
    run_->opt->whole_grads();  // --zero 2: the report reads the whole summed gradient
    return agreed(absl::DataLossError(absl::StrCat(
        "the weights after step ", step, " are not finite (",
        diagnose_nonfinite(*run_->model, run_->store, *run_->grid, {}), "); no checkpoint was written; lower the "
        "learning rate (--lr-scale) or enable --max-grad-norm")));
  }
  // A background save of an earlier step still running is waited for first (saves more frequent
  // than the disk allows): reported apart from the snapshot's own pause.
  const double w0 = now_seconds();
  absl::Status waited = run_->writer->wait();
  const double wait = now_seconds() - w0;
  if (waited.ok() && pending_save_step_ >= 0) committed_step_ = pending_save_step_;
  pending_save_step_ = -1;
  const double t0 = now_seconds();
  CheckpointMeta meta;
  meta.step = step;
  meta.tokens = tokens_seen_;
  meta.loader_state = loader_state_;
  meta.extra = o_.to_json();
  meta.extra["data_fingerprint"] = run_->data_fingerprint;
  if (pending_eval_step_ == step) meta.extra["pending_eval_tokens"] = pending_eval_tokens_;
  // A background write gets a copy of the parameters; a synchronous one reads the store (a
  // device store is copied to the host either way: checkpoints are written from host memory).
  const bool async = run_->writer->asynchronous();
  CheckpointSnapshot snap = run_->writer->take_buffers();
  fill_snapshot(snap, step, o_.model, run_->store, meta, *run_->opt,
                /*copy_params=*/async || run_->store.device() != Device::kCPU);
  absl::Status st = !waited.ok() ? waited : run_->writer->write(std::move(snap), [async](const std::string& path,
                                                           const SaveTimings& t) {
    std::printf("saved checkpoint %s (%.2f s%s: %s)\n", path.c_str(), t.total,
                async ? " in the background" : "", t.str().c_str());
    std::fflush(stdout);
  });
  // The checkpoint code agrees on its errors: every rank holds the same one.
  if (!st.ok()) return agreed(absl::Status(st.code(), absl::StrCat(st.message(), latest_note())));
  last_saved_step_ = step;
  (async ? pending_save_step_ : committed_step_) = step;
  const double pause = now_seconds() - t0;
  if (rank0_) {
    if (async)
      std::printf("checkpoint of step %lld: training paused %.3f s for the snapshot%s\n",
                  static_cast<long long>(step), pause,
                  wait >= 0.01 ? absl::StrFormat(" (and %.2f s waiting for the previous save)", wait).c_str()
                               : "");
    metrics_.write({{"step", step}, {"ckpt_pause_s", pause}, {"ckpt_wait_s", wait},
                    {"ckpt_async", async}});
    std::fflush(stdout);
  }
  t_last_ += pause + wait;  // the next step's tok/s excludes the save
  return absl::OkStatus();
}

absl::Status Trainer::finish_saves() {
  if (!run_->writer) return absl::OkStatus();
  absl::Status st = run_->writer->wait();
  if (!st.ok()) return agreed(absl::Status(st.code(), absl::StrCat(st.message(), latest_note())));
  if (pending_save_step_ >= 0) committed_step_ = pending_save_step_;
  pending_save_step_ = -1;
  return absl::OkStatus();
}

void Trainer::note_changed_options(const CheckpointMeta& meta) const {
  // What changes the run's course (the batch, the data order, the schedule): allowed on resume,
  // but said, so a changed flag is never a silent surprise in the curves. Which options those
  // are is the settings table's (train/settings.h).
  if (!rank0_ || !meta.extra.is_object()) return;
  const std::string changed = changed_on_resume(meta.extra, o_.to_json());
  if (!changed.empty())
    std::printf("note: resuming with options that differ from the checkpoint's run: %s\n",
                changed.c_str());
}

absl::Status Trainer::check_same_data(const CheckpointMeta& meta) {
  note_changed_options(meta);
  const auto it = meta.extra.is_object() ? meta.extra.find("data_fingerprint") : meta.extra.end();
  if (it == meta.extra.end() || !it->is_string()) {
    if (rank0_)
      std::printf("note: %s records no data fingerprint (an older checkpoint): the data cannot be "
                  "checked against the checkpoint's\n", resumed_from_.c_str());
    return absl::OkStatus();
  }
  const std::string theirs = it->get<std::string>();
  if (theirs == run_->data_fingerprint) return absl::OkStatus();
  if (o_.allow_other_data) {
    if (rank0_)
      std::printf("note: --allow-other-data: resuming %s (data fingerprint %s) on --data %s "
                  "(fingerprint %s)\n", resumed_from_.c_str(), theirs.c_str(),
                  o_.data_dir.c_str(), run_->data_fingerprint.c_str());
    return absl::OkStatus();
  }
  return agreed(absl::FailedPreconditionError(absl::StrCat(
      "--data ", o_.data_dir, " is not the data ", resumed_from_,
      " was trained on (data fingerprint ", run_->data_fingerprint, ", the checkpoint's ", theirs,
      ": the tokenizer or the training shards differ); resume with the checkpoint's data, or "
      "pass --allow-other-data to continue on this data")));
}

std::string Trainer::latest_note() const {
  return committed_step_ >= 0
             ? absl::StrCat("; the checkpoint of step ", committed_step_, " stays latest")
             : std::string("; no checkpoint of this run was completed (latest is unchanged)");
}

absl::Status Trainer::evaluate(int64_t step, int64_t max_tokens) {
  op_profile::Pause no_profile;
  run_->opt->sync_master_weights();  // --zero 2: samples decode from the fp32 masters
  // Each source's validation split (a mixture's: up to max_tokens each). The mixture's figures
  // are the sources' weighted by the --data weights (the first stage's), fixed for the whole run
  // so that a stage switch does not move them; with stages, also under the weights of the stage
  // the run is in (docs/usage.md "Data mixtures").
  const auto* mix = dynamic_cast<const data::MixtureLoader*>(run_->train.get());
  std::vector<EvalResult> per;
  EvalResult r, r_stage;
  for (const data::MixtureSource& s : o_.data.sources) {
    VT_ASSIGN_OR_RETURN(EvalResult one, vt::evaluate(*run_->engine, *run_->grid, s.dir,
                                                     o_.micro_batch, max_tokens, run_->token_bytes));
    per.push_back(one);
    if (run_->engine->stopped() || !one.complete()) break;
  }
  if (mix == nullptr || per.size() < o_.data.sources.size() || !per.back().complete()) {
    r = per.back();  // one directory's, or the partial pass a stop left
  } else {
    auto blend = [&](const std::vector<double>& w) {
      EvalResult b;
      b.loss = b.bpb = 0;
      b.tokens = b.planned_tokens = 0;
      for (size_t k = 0; k < per.size(); ++k) {
        b.loss += w[k] * per[k].loss;
        b.bpb += w[k] * per[k].bpb;
        b.tokens += per[k].tokens;
        b.planned_tokens += per[k].planned_tokens;
      }
      return b;
    };
    r = blend(o_.data.stages[0].weights);
    r_stage = blend(o_.data.stages[mix->stage()].weights);
  }
  if (run_->engine->stopped() || !r.complete()) {
    // A partial pass is not the evaluation: nothing is recorded; the checkpoint the stop saves
    // marks it pending and a resumed run runs it again.
    pending_eval_step_ = step;
    pending_eval_tokens_ = max_tokens;
    if (rank0_) {
      std::printf("eval step %lld | stopped by a signal after %lld of %lld tokens: not recorded; "
                  "a resumed run evaluates step %lld first\n",
                  static_cast<long long>(step), static_cast<long long>(r.tokens),
                  static_cast<long long>(r.planned_tokens), static_cast<long long>(step));
      std::fflush(stdout);
    }
    return absl::OkStatus();
  }
  if (pending_eval_step_ == step) pending_eval_step_ = -1;
  evals_.push_back({step, r.bpb});
  if (rank0_) {
    const bool staged = mix != nullptr && o_.data.stages.size() > 1;
    std::printf("eval step %lld | val loss %.4f | val bpb %.4f (%lld tokens%s\n",
                static_cast<long long>(step), r.loss, r.bpb, static_cast<long long>(r.tokens),
                staged ? absl::StrFormat(", --data weights) | stage %d's weights: val loss %.4f | "
                                         "val bpb %.4f",
                                         mix->stage() + 1, r_stage.loss, r_stage.bpb).c_str()
                       : ")");
    nlohmann::json rec = {{"step", step}, {"val_loss", r.loss}, {"val_bpb", r.bpb},
                          {"val_tokens", r.tokens}};
    if (staged) {
      rec["val_loss_stage"] = r_stage.loss;
      rec["val_bpb_stage"] = r_stage.bpb;
      rec["data_stage"] = mix->stage() + 1;
    }
    if (mix != nullptr) {
      for (size_t k = 0; k < per.size(); ++k) {
        const std::string& n = o_.data.sources[k].name;
        std::printf("eval step %lld | source %s | val loss %.4f | val bpb %.4f (%lld tokens)\n",
                    static_cast<long long>(step), n.c_str(), per[k].loss, per[k].bpb,
                    static_cast<long long>(per[k].tokens));
        rec["val_by_source"][n] = {{"val_loss", per[k].loss}, {"val_bpb", per[k].bpb},
                                   {"val_tokens", per[k].tokens}};
      }
    }
    metrics_.write(rec);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status Trainer::core(int64_t step) {
  op_profile::Pause no_profile;
  auto progress = [&](const std::string& line) {
    if (rank0_) std::printf("%s\n", line.c_str());
  };
  VT_ASSIGN_OR_RETURN(eval::CoreResult r,
                      eval::evaluate_core(*run_->model, *run_->grid, run_->core_tasks, *run_->tokenizer, progress));
  if (rank0_) {
    nlohmann::json centered = nlohmann::json::object(), accuracy = nlohmann::json::object();
    for (const eval::CoreTaskResult& t : r.tasks) {
      centered[t.label] = t.centered;
      accuracy[t.label] = t.accuracy;
    }
    std::printf("core step %lld | CORE %.4f (%zu tasks)\n", static_cast<long long>(step), r.core,
                r.tasks.size());
    metrics_.write({{"step", step}, {"core", r.core}, {"core_centered", centered}, {"core_accuracy", accuracy}});
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

void Trainer::replay_forward(const BlockOutputHook& observer) {
  auto again = open_train_source(o_);
  if (!again.ok() || !(*again)->load_state_json(loader_state_).ok()) return;  // opened once already
  const int64_t step_1based = completed_step_ + 1;
  PassHooks hooks;
  hooks.block_output = [&](int layer, const Tensor& x) {
    if (run_->inject.at(step_1based, FaultInjection::Where::kActivation) && run_->inject.layer == layer)
      ops::scale_copy(x, x, run_->inject.value);
    observer(layer, x);
  };
  run_->engine->forward_only(run_->micro_batches, o_.micro_batch, fetch_from(**again), {}, hooks);
}

absl::Status Trainer::nonfinite_step(int64_t index, double loss, double grad_norm, bool* skip) {
  run_->opt->whole_grads();  // --zero 2: the report reads the whole summed gradient
  const std::string where = diagnose_nonfinite(
      *run_->model, run_->store, *run_->grid, [this](const BlockOutputHook& obs) { replay_forward(obs); });
  const std::string what = absl::StrCat(
      std::isfinite(loss) ? absl::StrCat("the gradient norm is ", grad_norm)
                          : absl::StrCat("the loss is ", loss),
      " at step ", index + 1);
  ++nonfinite_in_row_;
  const bool weights_bad = where.find("parameters with non-finite") != std::string::npos;
  if (o_.on_nonfinite == OnNonfinite::kSkipStep && !weights_bad && nonfinite_in_row_ < o_.max_nonfinite_steps) {
    ++skipped_steps_;
    if (rank0_) {
      std::printf("skipping step %lld: %s (%s); update discarded (%lld in a row, %lld in all)\n",
                  static_cast<long long>(index + 1), what.c_str(), where.c_str(),
                  static_cast<long long>(nonfinite_in_row_), static_cast<long long>(skipped_steps_));
      metrics_.write({{"step", index + 1}, {"skipped", true}, {"loss", loss}, {"grad_norm", grad_norm}});
      std::fflush(stdout);
    }
    *skip = true;
    return absl::OkStatus();
  }
  const std::string last = last_saved_step_ >= 0 && !o_.ckpt_dir.empty()
                               ? absl::StrCat("the last checkpoint, step ", last_saved_step_, ", is in ", o_.ckpt_dir)
                               : std::string("no checkpoint was written");
  return agreed(absl::DataLossError(absl::StrCat(
      "training diverged: ", what,
      nonfinite_in_row_ > 1 ? absl::StrCat(" (", nonfinite_in_row_, " non-finite steps in a row)") : "",
      "; ", where, "; the weights of this step were not updated or saved (", last,
      "); lower the learning rate (--lr-scale), enable --max-grad-norm, or use --on-nonfinite "
      "skip-step to skip isolated bad steps")));
}

absl::StatusOr<Trainer::StepOutcome> Trainer::train_step(int64_t index) {
  const int64_t step_1based = index + 1;
  const double t_begin = now_seconds(), comm_begin = comm_seconds_total();
  const double bytes_begin = comm_bytes_total();
  data_s_ = 0;
  if (run_->inject.at(step_1based, FaultInjection::Where::kWeight) && run_->store.find(run_->inject.param) >= 0) {
    run_->opt->sync_master_weights();  // the refresh below casts every master
    ops::add_scalar(run_->store.param(run_->inject.param), 0, run_->inject.value);
    run_->store.refresh_compute_copy();
  }
  PassHooks hooks;
  if (run_->inject.at(step_1based, FaultInjection::Where::kActivation))
    hooks.block_output = [&](int layer, const Tensor& x) {
      if (layer == run_->inject.layer) ops::scale_copy(x, x, run_->inject.value);
    };
  const DType wire = o_.grad_sync;
  // Each hook first zeroes what of its gradients no GEMM wrote this step (deferred zeroing:
  // ParamStore::begin_gradients; normally nothing).
  ParamStore& store = run_->store;
  if (o_.overlap_grad_sync && o_.zero == 1) {
    hooks.layer_grads_done = [&](int layer) {
      store.zero_unwritten(layer);
      run_->dp_sync->layer_done(layer);
    };
    hooks.head_grads_done = [&] {
      store.zero_unwritten(-1);
      run_->dp_sync->head_done();
    };
  } else if (o_.overlap_grad_sync) {  // --zero 2: the reduces into the owners
    hooks.layer_grads_done = [&](int layer) {
      store.zero_unwritten(layer);
      run_->opt->layer_grads_done(layer, wire);
    };
    hooks.head_grads_done = [&] {
      store.zero_unwritten(-1);
      run_->opt->head_grads_done(wire);
    };
  }
  // --zero 2: the last step's parameter gathers, waited layer by layer as the forward needs them.
  if (o_.zero == 2)
    hooks.params_needed = [&](int layer) { run_->opt->finish_param_gathers(layer); };
  if (slow_.rank == world_->rank() && slow_.seconds > 0)  // a straggler, on purpose (tests)
    std::this_thread::sleep_for(std::chrono::duration<double>(slow_.seconds));
  // Every gradient zeroed, or (the GEMM-written ones) overwritten by its first GEMM of the step.
  run_->store.begin_gradients();
  const float grad_scale = 1.0f / static_cast<float>(o_.global_batch);
  double loss_sum = 0.0;
  const bool graph_step = o_.cuda_graphs == "step";
  optim::StepStats device_st;  // --cuda-graphs step: the step the device ran
  bool applied = false;
  {
    // --fp8 e4m3: the weights' FP8 codes, quantized once for this step's micro-batches and dropped
    // before the optimizer changes the weights (core/ops/gemm.h Fp8WeightCacheScope).
    ops::Fp8WeightCacheScope fp8_weights;
    if (o_.cuda_graphs != "off") {
      if (!graphs_) {
        std::string why = GraphMicroSteps::unsupported(o_, *run_);
        if (why.empty() && graph_step) why = GraphOptimizerStep::unsupported(*run_->opt);
        if (!why.empty())
          return absl::InvalidArgumentError(absl::StrCat("--cuda-graphs ", o_.cuda_graphs, ": ", why));
        graphs_ = std::make_unique<GraphMicroSteps>(*run_->model, run_->store, o_.micro_batch,
                                                    o_.model.seq_len, o_.model.vocab_size);
        if (graph_step) opt_graph_ = std::make_unique<GraphOptimizerStep>(*run_->opt);
      }
      run_->opt->finish_param_gathers();  // a recorded graph has no host waits inside
      VT_RETURN_IF_ERROR(graphs_->queue(run_->micro_batches, grad_scale, fetch_from(*run_->train)));
    } else {
      loss_sum = run_->engine->train_step(run_->micro_batches, o_.micro_batch, grad_scale,
                                          fetch_from(*run_->train), hooks);
      if (run_->engine->stopped()) return StepOutcome::kStopped;  // partial gradients: discarded
    }
  }
  run_->opt->finish_param_gathers();  // any a stage's forward did not need
  run_->store.zero_unwritten();  // a gradient no GEMM wrote this step reads as zero
  sync_gradients(run_->store, *run_->grid, *run_->dp_sync, *run_->opt, wire);
  if (run_->inject.at(step_1based, FaultInjection::Where::kGradient) && run_->store.find(run_->inject.param) >= 0)
    ops::add_scalar(run_->store.grad(run_->inject.param), 0, run_->inject.value);
  if (graph_step) {
    // The whole update on the device, no host read before it; then the step's one read of the
    // losses and of the guard (the norm for the log, whether the update ran).
    device_st = run_->opt->begin_step(index, o_.steps);
    VT_RETURN_IF_ERROR(opt_graph_->run(graphs_->losses()));
  }
  if (o_.cuda_graphs != "off") loss_sum = graphs_->read_loss_sum();
  if (graph_step) device_st = run_->opt->finish_step(device_st, &applied);
  // Sums over the data-parallel replicas and the pipeline (only the last stage has losses).
  run_->grid->pp()->all_reduce_sum(&loss_sum, 1);
  run_->grid->dp()->all_reduce_sum(&loss_sum, 1);
  const double loss = loss_sum / static_cast<double>(o_.global_batch);

  const double grad_norm = graph_step ? device_st.grad_norm : run_->opt->grad_norm();
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    // --cuda-graphs step: the guard found the same and left the weights untouched.
    VT_CHECK_MSG(!graph_step || !applied, "the device applied a step with loss " << loss
                                                                             << ", norm " << grad_norm);
    bool skip = false;
    VT_RETURN_IF_ERROR(nonfinite_step(index, loss, grad_norm, &skip));
    completed_step_ = step_1based;  // the data of the step is consumed; no update
    run_->opt->set_step_count(step_1based);
    tokens_seen_ += o_.global_batch;
    loader_state_ = run_->train->state_json();
    note_data_stage(step_1based);
    check_health(step_1based, now_seconds() - t_begin, comm_seconds_total() - comm_begin);
    return StepOutcome::kSkipped;
  }
  VT_CHECK_MSG(!graph_step || applied, "the device skipped a finite step (loss " << loss
                                                                              << ", norm " << grad_norm << ")");
  nonfinite_in_row_ = 0;
  const double comm_before = comm_seconds_total();
  optim::StepStats st = graph_step ? device_st : run_->opt->step(index, o_.steps, grad_norm);
  completed_step_ = step_1based;
  tokens_seen_ += o_.global_batch;
  loader_state_ = run_->train->state_json();
  const double comm_s = comm_seconds_total() - comm_before;
  const double comm_bytes = comm_bytes_total() - bytes_begin;  // this rank's, the whole step
  // The pipeline's idle share (PipelineEngine::StepTimes, reduced over the pipeline ranks):
  // bench/bench_layouts.py compares wait / busy with the theory (pp-1) / (vpp M).
  note_data_stage(step_1based);
  log_step(step_1based, loss, st, comm_s, comm_bytes, run_->engine->last_step_times());
  check_health(step_1based, now_seconds() - t_begin, comm_seconds_total() - comm_begin);
  return StepOutcome::kApplied;
}

void Trainer::note_data_stage(int64_t done) {
  const auto* mix = dynamic_cast<const data::MixtureLoader*>(run_->train.get());
  if (mix == nullptr || mix->stage() == data_stage_) return;
  data_stage_ = mix->stage();
  if (!rank0_) return;
  const data::MixtureStage& st = o_.data.stages[data_stage_];
  std::printf("data: stage %zu of %zu starts in step %lld (from token %lld): %s; val loss and "
              "bpb stay under the --data weights (%s), also shown under this stage's\n",
              data_stage_ + 1, o_.data.stages.size(), static_cast<long long>(done),
              static_cast<long long>(st.start_tokens), o_.data.describe_stage(data_stage_).c_str(),
              o_.data.describe_stage(0).c_str());
  std::fflush(stdout);
}

void Trainer::print_summary(bool stopped) const {
  if (!rank0_) return;
  RunSummary s;
  s.stopped = stopped;
  s.first_step = first_step_;
  s.last_step = completed_step_;
  s.total_steps = o_.steps;
  s.tokens_start = tokens_at_start_;
  s.tokens_end = tokens_seen_;
  s.wall_seconds = now_seconds() - t_setup_;
  s.tok_per_s = step_tok_per_s_;
  s.mfu = step_mfu_;
  s.evals = evals_;
  s.earlier_evals = earlier_evals_;
  s.ckpt_dir = o_.ckpt_dir;
  if (!o_.ckpt_dir.empty() && committed_step_ >= 0)
    s.checkpoint = (fs::path(o_.ckpt_dir) / checkpoint_file_name(committed_step_)).string();
  s.metrics = o_.metrics_path;  // a failed sink was named when it failed
  s.tensorboard = o_.tensorboard_dir;
  s.slurm_job = std::getenv("SLURM_JOB_ID") != nullptr && world_->size() > 1;
  if (!o_.command.empty()) s.resume_command = resume_command_line(o_.command, world_->size());
  std::printf("%s", format_run_summary(s).c_str());
  std::fflush(stdout);
}

void Trainer::check_health(int64_t step, double step_s, double comm_s) {
  health_->add_step(step_s, comm_s, data_s_);
  const std::optional<HealthReport> r = health_->maybe_report(step);
  if (!r || !rank0_) return;
  const bool quiet = r->stragglers.empty() && step % o_.log_every != 0;
  if (!quiet) std::printf("%s", format_health(*r).c_str());
  metrics_.write(health_json(*r));
  std::fflush(stdout);
}

void Trainer::log_step(int64_t done, double loss, const optim::StepStats& st, double comm_s,
                       double comm_bytes,
                       const PipelineEngine::StepTimes& pp) {
  const double t = now_seconds();
  const double step_s = t - t_last_;  // from the end of what came before (an evaluation excluded)
  const double tok_per_s = o_.global_batch / std::max(1e-9, step_s);
  const double mfu = run_->flops_per_token * tok_per_s / run_->peak_flops;
  const double loss_smooth = smooth_loss_.add(loss);
  eta_.add(step_s);
  step_tok_per_s_.push_back(tok_per_s);
  step_mfu_.push_back(mfu);
  if (o_.profile) {  // the first step (allocations, first touches) is left out
    if (done == first_step_ + 1) {
      op_profile::reset();
    } else {
      profile_wall_ += t - t_last_;
      ++profile_steps_;
    }
  }
  t_last_ = t;
  // --fp8: this step's FP8 counts (this rank's GEMMs), taken on every rank to restart them.
  nlohmann::json fp8;
  if (o_.fp8 != "off") {
    const Fp8Tally ft = ops::fp8_tally_take();
    fp8 = nlohmann::json::object();
    int64_t saturated = 0;
    for (int k = 0; k < kFp8GemmKinds; ++k) {
      fp8[fp8_gemm_kind_name(k)] = {{"gemms", ft.gemms[k]},
                                    {"saturated", {ft.saturated[k][0], ft.saturated[k][1]}},
                                    {"underflow", {ft.underflow[k][0], ft.underflow[k][1]}}};
      saturated += ft.saturated[k][0] + ft.saturated[k][1];
    }
    if (saturated > 0 && rank0_)
      std::printf("fp8: step %lld saturated %lld elements (clamped to the format's max)\n",
                  static_cast<long long>(done), static_cast<long long>(saturated));
  }
  if (!rank0_) return;
  nlohmann::json by_source = run_->train->tokens_by_source();
  nlohmann::json rec = {{"step", done},
                  {"loss", loss},
                  {"loss_smooth", loss_smooth},
                  {"lr", st.matrix_lr},
                  {"tokens", tokens_seen_},
                  {"tok_per_s", tok_per_s},
                  {"mfu", mfu},
                  {"grad_norm", st.grad_norm},
                  {"comm_s", comm_s},
                  {"comm_bytes", comm_bytes},
                  {"pp_wait_s", pp.wait_s},
                  {"pp_busy_s", pp.busy_s},
                  {"pp_pass_s", pp.pass_s},
                  {"pp_pass_max_s", pp.pass_max_s},
                  {"pp_replay_s", pp.replay_s},
                  {"device_bytes", device_bytes()},
                  {"device_peak_bytes", device_peak_bytes()},
                  {"tokens_by_source", std::move(by_source)}};
  if (o_.data.stages.size() > 1) rec["data_stage"] = data_stage_ + 1;
  if (!fp8.is_null()) rec["fp8"] = std::move(fp8);
  metrics_.write(rec);
  if (done % o_.log_every == 0 || done == o_.steps || done == first_step_ + 1) {
    std::printf("%s\n", progress_line(done, o_.steps, loss, loss_smooth, st.matrix_lr, tok_per_s, mfu,
                                      eta_.eta(o_.steps - done)).c_str());
    if (done == first_step_ + 1 && run_->device.device != Device::kCPU)
      std::printf("device memory after the first step: %.2f GiB in use, peak %.2f GiB\n",
                  device_bytes() / 1073741824.0, device_peak_bytes() / 1073741824.0);
    std::fflush(stdout);
  }
}

absl::Status Trainer::stop_here(const std::string& why) {
  VT_RETURN_IF_ERROR(save(completed_step_));
  VT_RETURN_IF_ERROR(finish_saves());
  if (rank0_) {
    if (o_.ckpt_dir.empty())
      std::printf("%s: stopped after step %lld; no checkpoint was saved because no --ckpt-dir was "
                  "given (a new run starts from step 0), exiting with code %d\n",
                  why.c_str(), static_cast<long long>(completed_step_), kExitRequeue);
    else
      std::printf("%s: checkpoint of step %lld saved, exiting with code %d so the job can be "
                  "resumed (--resume auto)\n",
                  why.c_str(), static_cast<long long>(completed_step_), kExitRequeue);
    std::fflush(stdout);
  }
  print_summary(/*stopped=*/true);
  return absl::AbortedError("stopped after saving a checkpoint");
}

absl::Status Trainer::run() {
  first_step_ = completed_step_;
  tokens_at_start_ = tokens_seen_;
  const std::string signal_stop = "stop signal received";
  // An evaluation the checkpoint marks pending (cut short by a stop, or the final one, which
  // runs after the final checkpoint is saved) runs first.
  if (pending_eval_step_ == completed_step_ && pending_eval_tokens_ > 0) {
    if (rank0_) {
      std::printf("running the evaluation of step %lld that the checkpoint marks pending\n",
                  static_cast<long long>(completed_step_));
    }
    VT_RETURN_IF_ERROR(evaluate(completed_step_, pending_eval_tokens_));
    if (run_->engine->stopped()) return stop_here(signal_stop + " during an evaluation");
  }
  if (completed_step_ == o_.steps && !resumed_from_.empty()) {
    if (rank0_)
      std::printf("the checkpoint %s is already at --steps %lld: nothing to train\n",
                  resumed_from_.c_str(), static_cast<long long>(o_.steps));
    return absl::OkStatus();
  }
  t_start_ = t_last_ = now_seconds();
  if (o_.profile) {
    profile_clock_ = device_profile_clock(run_->device);
    op_profile::set_device_clock(profile_clock_.get());
  }
  op_profile::enable(o_.profile);
  if (completed_step_ == 0 && o_.eval_every > 0) {
    VT_RETURN_IF_ERROR(evaluate(0, o_.eval_tokens));
    if (run_->engine->stopped()) return stop_here(signal_stop);
  }
  for (int64_t index = completed_step_; index < o_.steps; ++index) {
    VT_ASSIGN_OR_RETURN(StepOutcome outcome, train_step(index));
    if (outcome == StepOutcome::kStopped) return stop_here(absl::StrCat(signal_stop, " during step ", index + 1));
    const int64_t done = index + 1;
    if (done == o_.steps) break;
    if (outcome == StepOutcome::kApplied) {
      if (o_.eval_every > 0 && done % o_.eval_every == 0) {
        VT_RETURN_IF_ERROR(evaluate(done, o_.eval_tokens));
        if (run_->engine->stopped()) return stop_here(signal_stop + " during an evaluation");
        t_last_ = now_seconds();  // the next step's tok/s excludes the evaluation
      }
      if (o_.core_every > 0 && done % o_.core_every == 0) {
        VT_RETURN_IF_ERROR(core(done));
        t_last_ = now_seconds();
      }
      if (o_.sample_every > 0 && done % o_.sample_every == 0 && world_->size() == 1 &&
          run_->device.device == Device::kCPU) {
        SampleOptions so;
        so.max_tokens = 48;
        so.temperature = 0;
        std::vector<int32_t> prompt = {run_->tokenizer->bos_id()};
        auto text = run_->tokenizer->decode(sample(*run_->model, prompt, so));
        std::printf("sample: %s\n", text.ok() ? text->c_str() : "<undecodable>");
      }
    }
    if (o_.ckpt_every > 0 && done % o_.ckpt_every == 0) VT_RETURN_IF_ERROR(save(done));
    if (done == o_.stop_at_step) return stop_here(absl::StrCat("--stop-at-step ", done));
    // A signal only some ranks received (the first stage's vote between micro-batches sees
    // only its own ranks): every rank agrees at the step's end.
    float stop = stop_signal_received() != 0 ? 1.0f : 0.0f;
    world_->all_reduce_max(&stop, 1);
    if (stop > 0.0f) return stop_here(signal_stop);
  }
  op_profile::enable(false);
  if (o_.profile && rank0_) {
    if (profile_steps_ > 0)
      std::printf("%s", op_profile::report(profile_wall_, profile_steps_).c_str());
    else
      std::printf("--profile: no step after the first to report on\n");
  }
  if (profile_clock_) {
    op_profile::set_device_clock(nullptr);
    profile_clock_.reset();
  }
  // The run's state first: a failing evaluation must not cost it. The final checkpoint marks
  // the final evaluation pending (it runs after the save), so a stop during it exits 75 and the
  // resumed run evaluates instead of training.
  if (o_.final_eval_tokens > 0) {
    pending_eval_step_ = o_.steps;
    pending_eval_tokens_ = o_.final_eval_tokens;
  }
  VT_RETURN_IF_ERROR(save(o_.steps));
  VT_RETURN_IF_ERROR(finish_saves());
  if (o_.final_eval_tokens > 0) {
    VT_RETURN_IF_ERROR(evaluate(o_.steps, o_.final_eval_tokens));
    if (run_->engine->stopped()) return stop_here(signal_stop + " during the final evaluation");
  }
  if (o_.core_every > 0) VT_RETURN_IF_ERROR(core(o_.steps));
  if (skipped_steps_ > 0 && rank0_)
    std::printf("%lld step(s) were skipped for non-finite values (--on-nonfinite skip-step)\n",
                static_cast<long long>(skipped_steps_));
  print_summary(/*stopped=*/false);
  return absl::OkStatus();
}

absl::Status run_train(const TrainOptions& options, Communicator* world) {
  Trainer trainer(options, world);
  VT_RETURN_IF_ERROR(trainer.setup());
  return trainer.run();
}

}  // namespace vt
