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
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_dir.h"
#include "core/backend.h"
#include "core/blas_info.h"
#include "core/op_profile.h"
#include "core/ops.h"
#include "core/rng.h"
#include "data/data_fingerprint.h"
#include "eval/core_eval.h"
#include "model/flops.h"
#include "parallel/comm_watchdog.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "train/evaluate.h"
#include "plan/memory_estimate.h"
#include "train/preflight.h"

namespace vt {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Peak fp32 FLOP/s of the cores this job runs on, for MFU on the CPU backend: per core
// VTRAIN_PEAK_FLOPS_PER_CORE, or 2 AVX2 FMA units x 8 lanes x 2 flops x 2.5 GHz = 80 GFLOP/s
// (a nominal figure, stated in docs/usage.md); cores = the threads the ranks use, at most the
// cores of the nodes they share (ranks oversubscribing one machine do not add peak).
double cpu_peak_flops(Communicator* world) {
  double per_core = 32.0 * 2.5e9;
  if (const char* env = std::getenv("VTRAIN_PEAK_FLOPS_PER_CORE")) per_core = std::atof(env);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  // Ranks on this host, from a hash of its name summed over the job.
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  double my_host = static_cast<double>(fnv1a64(host) % 1000003);
  std::vector<float> hosts(world->size());
  float mine = static_cast<float>(my_host);
  world->all_gather(&mine, hosts.data(), 1);
  std::sort(hosts.begin(), hosts.end());
  const double nodes = std::unique(hosts.begin(), hosts.end()) - hosts.begin();
  const double threads = static_cast<double>(world->size()) * omp_get_max_threads();
  return per_core * std::min(threads, nodes * cores);
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
void sync_gradients(ParamStore& store, const ProcessGrid& grid, optim::OverlappedGradSync& dp_sync) {
  if (grid.shape().pp > 1)
    for (int i = 0; i < store.size(); ++i)
      if (store.info(i).pp_replicated) {
        Tensor g = store.grad(i);
        grid.pp()->all_reduce_sum(g);
      }
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
  const ModelConfig& cfg = o_.model;
  // Layout errors are the same on every rank: agreed, so each rank exits with one message.
  auto shape_or = make_grid_shape(world_->size(), o_.tp, o_.pp, model_split(cfg));
  if (!shape_or.ok()) return agreed(shape_or.status());
  shape_ = *shape_or;
  rows_per_micro_ = static_cast<int64_t>(o_.micro_batch) * shape_.dp;  // global rows
  if (o_.global_batch == 0) o_.global_batch = rows_per_micro_ * cfg.seq_len;
  if (o_.global_batch % (rows_per_micro_ * cfg.seq_len) != 0)
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o_.global_batch, " tokens is not a multiple of micro-batch ",
        o_.micro_batch, " x seq-len ", cfg.seq_len, " x data-parallel size ", shape_.dp)));
  {
    // Derived from the flags, in 64 bits, before anything is sized by it.
    const int64_t micro = o_.global_batch / (rows_per_micro_ * cfg.seq_len);
    if (micro > kMaxMicroBatches)
      return agreed(absl::InvalidArgumentError(absl::StrCat(
          "--global-batch ", o_.global_batch, " tokens makes ", micro,
          " micro-batches per step and data-parallel rank (micro-batch ", o_.micro_batch,
          " x seq-len ", cfg.seq_len, " x data-parallel size ", shape_.dp, " = ",
          rows_per_micro_ * cfg.seq_len, " tokens each), above vtrain's limit of ",
          kMaxMicroBatches, "; lower --global-batch or raise --micro-batch")));
    micro_batches_ = static_cast<int>(micro);
  }
  {
    absl::Status st = check_virtual_stages(cfg.n_layer, shape_.pp, o_.vpp, micro_batches_);
    if (!st.ok()) return agreed(st);
  }
  // --metrics before anything is made or written (rank 0 writes it; its view is agreed).
  {
    std::vector<std::pair<std::string, std::string>> dirs = {{o_.data_dir, "--data"},
                                                             {o_.ckpt_dir, "--ckpt-dir"}};
    if (o_.resume != "none" && o_.resume != "auto")
      dirs.emplace_back(fs::path(o_.resume).parent_path().string(), "--resume checkpoint's");
    VT_RETURN_IF_ERROR(all_ok(world_, rank0_ ? check_metrics_path(o_.metrics_path, o_.resume != "none", dirs)
                                             : absl::OkStatus()));
  }
  VT_ASSIGN_OR_RETURN(inject_, FaultInjection::from_env());
  VT_ASSIGN_OR_RETURN(device_, setup_device(o_, world_));
  grid_ = std::make_unique<ProcessGrid>(world_, shape_);
  VT_ASSIGN_OR_RETURN(comm_desc_, setup_device_comms(o_, device_, *grid_));
  chunks_ = virtual_stage_layers(cfg.n_layer, shape_.pp, o_.vpp, grid_->coords().pp);
  layer_begin_ = chunks_.front().first;
  layer_end_ = chunks_.back().second;
  ModelParallel par;
  par.tp = grid_->tp();
  par.layer_begin = layer_begin_;
  par.layer_end = layer_end_;
  if (o_.vpp > 1) par.chunks = chunks_;
  model_ = std::make_unique<GPT>(cfg, par);
  model_->set_recompute(o_.recompute);
  if (o_.table_offload) store_.keep_in_host_memory(ParamGroup::kValueTable);
  model_->register_params(store_);

  // Memory before anything large is allocated: the parameters are registered, not allocated.
  int held_layers = 0;
  for (const auto& [b, e] : chunks_) held_layers += e - b;
  const MemoryEstimate mem = estimate_memory(cfg, store_, shape_, grid_->coords(), held_layers,
                                             o_.micro_batch, device_.act_dtype, o_.recompute, o_.vpp,
                                             micro_batches_);
  memory_line_ = mem.to_string();
  VT_RETURN_IF_ERROR(check_memory_fits(mem, o_, shape_, grid_->coords().pp, device_.device,
                                       device_.act_dtype, world_));

  // The data: the training shards' ids, the validation split against what evaluations read.
  data::LoaderOptions lo;
  lo.vocab_size = cfg.vocab_size;
  lo.seed = o_.seed;
  {
    // Every rank reads the directory itself, so a file missing or different on one node is that
    // rank's error alone: all_ok gives it to every rank (rank 0 prints it) instead of leaving the
    // others waiting in the next collective.
    auto train = data::DataLoader::open(o_.data_dir, "train", lo);
    VT_RETURN_IF_ERROR(all_ok(world_, train.status()));
    train_ = std::make_unique<data::DataLoader>(std::move(*train));
    auto tok = data::load_tokenizer(o_.data_dir);
    VT_RETURN_IF_ERROR(all_ok(world_, tok.status()));
    tokenizer_ = std::move(*tok);
    // What the checkpoints record as this run's data (data/data_fingerprint.h).
    auto fp = data::data_fingerprint((fs::path(o_.data_dir) / data::kTokenizerFile).string(),
                                     train_->shard_paths());
    VT_RETURN_IF_ERROR(all_ok(world_, fp.status()));
    data_fingerprint_ = *fp;
  }
  token_bytes_ = data::token_bytes_table(*tokenizer_);
  if (o_.global_batch > train_->tokens_per_epoch())
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o_.global_batch, " tokens per step is more than the ",
        train_->tokens_per_epoch(), " training tokens of ", o_.data_dir,
        " (one step would read the data more than once); lower --global-batch to at most ",
        train_->tokens_per_epoch() / (rows_per_micro_ * cfg.seq_len) * rows_per_micro_ * cfg.seq_len)));
  VT_RETURN_IF_ERROR(check_train_ids(*train_, world_));
  const int64_t eval_tokens = std::max(o_.eval_every > 0 ? o_.eval_tokens : 0, o_.final_eval_tokens);
  if (eval_tokens > 0) {
    // The flag that set the larger evaluation (--final-eval-tokens defaults to --eval-tokens).
    const std::string size_flag =
        o_.final_eval_tokens == eval_tokens && o_.final_eval_tokens != o_.eval_tokens
            ? "--final-eval-tokens"
            : "--eval-tokens";
    absl::Status st = check_eval_split(o_.data_dir, cfg.vocab_size, cfg.seq_len, o_.micro_batch,
                                       shape_.dp, eval_tokens, world_, size_flag);
    if (!st.ok())
      return agreed(absl::Status(st.code(), absl::StrCat(st.message(),
                                                         o_.eval_every > 0 ? "" : "; or pass --final-eval-tokens 0 to train without evaluating")));
  }
  if (o_.core_every > 0) {
    auto tasks = eval::load_core_bundle(o_.core_dir, static_cast<int>(o_.core_max_per_task));
    VT_RETURN_IF_ERROR(all_ok(world_, tasks.status()));
    core_tasks_ = std::move(*tasks);
  }

  // Allocation, init, optimizer.
  store_.finalize(device_.device, device_.act_dtype);
  model_->init_params(o_.seed);
  engine_ = std::make_unique<PipelineEngine>(*model_, *grid_);
  engine_->set_stop_check([] { return stop_signal_received() != 0; });
  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.muon.lr = o_.matrix_lr * o_.lr_scale;
  oc.adamw.scalar.lr = o_.scalar_lr;
  oc.adamw.gain.lr = o_.gain_lr;
  for (optim::AdamWHyper* h : {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table,
                               &oc.adamw.scalar, &oc.adamw.gain})
    h->lr *= o_.lr_scale;
  oc.schedule.warmup_steps = o_.warmup_steps;
  oc.schedule.warmdown_frac = o_.warmdown_frac;
  oc.max_grad_norm = o_.max_grad_norm;
  if (o_.polar_express) oc.muon.ns = optim::NsKind::kPolarExpress;
  oc.muon.ns_dtype = o_.muon_ns_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  opt_ = std::make_unique<optim::DistributedOptimizer>(&store_, oc, *grid_);
  dp_sync_ = std::make_unique<optim::OverlappedGradSync>(&store_, grid_->dp());

  // The checkpoint directory: locked, then resumed from.
  if (!o_.ckpt_dir.empty()) {
    VT_ASSIGN_OR_RETURN(lock_, CheckpointDirLock::acquire(o_.ckpt_dir, *grid_));
  }
  if (!o_.ckpt_dir.empty()) {
    VT_ASSIGN_OR_RETURN(writer_, CheckpointWriter::create(world_, *grid_, o_.ckpt_dir, o_.keep_last,
                                                          o_.async_save));
  }
  VT_ASSIGN_OR_RETURN(resumed_from_, resume_path(o_, *grid_));
  if (!resumed_from_.empty()) {
    VT_ASSIGN_OR_RETURN(CheckpointMeta meta,
                        load_training_state(resumed_from_, cfg, store_, *opt_, *grid_));
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
    VT_RETURN_IF_ERROR(train_->load_state_json(meta.loader_state));
  }
  loader_state_ = train_->state_json();
  if (!o_.ckpt_dir.empty() && rank0_) {
    VT_RETURN_IF_ERROR(tokenizer_->save((fs::path(o_.ckpt_dir) / "tokenizer.json").string()));
  }
  if (rank0_) VT_RETURN_IF_ERROR(metrics_.open(o_.metrics_path));

  flops_per_token_ = flops_per_token(cfg);
  // MFU's peak: on GPUs the bf16 dense peak of an H100/H200 SXM (989 TFLOP/s per GPU; set
  // VTRAIN_PEAK_TFLOPS for other parts), on CPUs a nominal figure per core.
  const char* peak_env = std::getenv("VTRAIN_PEAK_TFLOPS");
  peak_flops_ = o_.device == "cuda" ? (peak_env ? std::atof(peak_env) : 989.0) * 1e12 * world_->size()
                                    : cpu_peak_flops(world_);
  print_banner();
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
  std::string layers;
  for (const auto& [b, e] : chunks_) absl::StrAppend(&layers, layers.empty() ? "" : ", ", b, "..", e - 1);
  std::printf("layout: %d ranks = dp %d x tp %d x pp %d%s | this stage: layers %s, %.2fM params\n",
              world_->size(), shape_.dp, shape_.tp, shape_.pp,
              o_.vpp > 1 ? absl::StrCat(" x vpp ", o_.vpp, " (interleaved 1F1B)").c_str() : "",
              layers.c_str(), static_cast<double>(store_.total_numel()) / 1e6);
  std::printf("batch: %lld tokens/step = %d rows x %d tokens x dp %d x %d micro-batches; %lld steps\n",
              static_cast<long long>(o_.global_batch), o_.micro_batch, cfg.seq_len, shape_.dp,
              micro_batches_, static_cast<long long>(o_.steps));
  std::printf("device: %s | communication: %s\n", device_.description.c_str(), comm_desc_.c_str());
  std::printf("%s\n", blas_description().c_str());
  std::printf("memory estimate (rank 0): %s\n", memory_line_.c_str());
  if (!resumed_from_.empty())
    std::printf("resumed from %s at step %lld\n", resumed_from_.c_str(),
                static_cast<long long>(completed_step_));
  std::fflush(stdout);
}

FetchBatch Trainer::fetch_from(data::DataLoader& loader) {
  const int64_t T = o_.model.seq_len, rows = rows_per_micro_;
  return [this, &loader, T, rows](int, int32_t* in, int32_t* tg) {
    absl::Status st = loader.next_batch_into(rows, T, grid_->coords().dp, shape_.dp, in, tg);
    if (!st.ok()) abort_job(std::string(st.message()));
  };
}

absl::Status Trainer::save(int64_t step) {
  op_profile::Pause no_profile;
  if (o_.ckpt_dir.empty() || step == last_saved_step_) return absl::OkStatus();
  // Never a checkpoint of non-finite weights (an update can overflow even from finite
  // gradients): one reduction over the parameters, agreed by every rank.
  double sq = ops::sum_squares(store_.params_tensor());
  if (store_.has_host_params()) sq += ops::sum_squares(store_.host_params_tensor());
  world_->all_reduce_sum(&sq, 1);
  if (!std::isfinite(sq))
    return agreed(absl::DataLossError(absl::StrCat(
        "the weights after step ", step, " are not finite (",
        diagnose_nonfinite(*model_, store_, *grid_, {}), "); no checkpoint was written; lower the "
        "learning rate (--lr-scale) or enable --max-grad-norm")));
  // A background save of an earlier step still running is waited for first (saves more frequent
  // than the disk allows): reported apart from the snapshot's own pause.
  const double w0 = now_seconds();
  absl::Status waited = writer_->wait();
  const double wait = now_seconds() - w0;
  if (waited.ok() && pending_save_step_ >= 0) committed_step_ = pending_save_step_;
  pending_save_step_ = -1;
  const double t0 = now_seconds();
  CheckpointMeta meta;
  meta.step = step;
  meta.tokens = tokens_seen_;
  meta.loader_state = loader_state_;
  meta.extra = o_.to_json();
  meta.extra["data_fingerprint"] = data_fingerprint_;
  if (pending_eval_step_ == step) meta.extra["pending_eval_tokens"] = pending_eval_tokens_;
  // A background write gets a copy of the parameters; a synchronous one reads the store (a
  // device store is copied to the host either way: checkpoints are written from host memory).
  const bool async = writer_->asynchronous();
  CheckpointSnapshot snap = writer_->take_buffers();
  fill_snapshot(snap, step, o_.model, store_, meta, *opt_,
                /*copy_params=*/async || store_.device() != Device::kCPU);
  absl::Status st = !waited.ok() ? waited : writer_->write(std::move(snap), [async](const std::string& path,
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
  if (!writer_) return absl::OkStatus();
  absl::Status st = writer_->wait();
  if (!st.ok()) return agreed(absl::Status(st.code(), absl::StrCat(st.message(), latest_note())));
  if (pending_save_step_ >= 0) committed_step_ = pending_save_step_;
  pending_save_step_ = -1;
  return absl::OkStatus();
}

void Trainer::note_changed_options(const CheckpointMeta& meta) const {
  // What changes the run's course (the batch, the data order, the schedule): allowed on resume,
  // but said, so a changed flag is never a silent surprise in the curves.
  static const char* const kWatched[] = {"global_batch", "seed", "matrix_lr", "scalar_lr",
                                         "gain_lr", "lr_scale", "warmup_steps", "warmdown_frac",
                                         "max_grad_norm", "polar_express"};
  if (!rank0_ || !meta.extra.is_object()) return;
  const nlohmann::json now = o_.to_json();
  std::string changed;
  for (const char* k : kWatched) {
    const auto a = meta.extra.find(k);
    if (a == meta.extra.end() || !now.contains(k) || *a == now[k]) continue;
    absl::StrAppend(&changed, changed.empty() ? "" : ", ", k, " ", a->dump(), " -> ", now[k].dump());
  }
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
  if (theirs == data_fingerprint_) return absl::OkStatus();
  if (o_.allow_other_data) {
    if (rank0_)
      std::printf("note: --allow-other-data: resuming %s (data fingerprint %s) on --data %s "
                  "(fingerprint %s)\n", resumed_from_.c_str(), theirs.c_str(),
                  o_.data_dir.c_str(), data_fingerprint_.c_str());
    return absl::OkStatus();
  }
  return agreed(absl::FailedPreconditionError(absl::StrCat(
      "--data ", o_.data_dir, " is not the data ", resumed_from_,
      " was trained on (data fingerprint ", data_fingerprint_, ", the checkpoint's ", theirs,
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
  VT_ASSIGN_OR_RETURN(EvalResult r, vt::evaluate(*engine_, *grid_, o_.data_dir, o_.micro_batch,
                                                 max_tokens, token_bytes_));
  if (engine_->stopped() || !r.complete()) {
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
  if (rank0_) {
    std::printf("eval step %lld | val loss %.4f | val bpb %.4f (%lld tokens)\n",
                static_cast<long long>(step), r.loss, r.bpb, static_cast<long long>(r.tokens));
    metrics_.write({{"step", step}, {"val_loss", r.loss}, {"val_bpb", r.bpb},
                    {"val_tokens", r.tokens}});
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
                      eval::evaluate_core(*model_, *grid_, core_tasks_, *tokenizer_, progress));
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
  data::LoaderOptions lo;
  lo.vocab_size = o_.model.vocab_size;
  lo.seed = o_.seed;
  auto again = data::DataLoader::open(o_.data_dir, "train", lo);
  if (!again.ok() || !again->load_state_json(loader_state_).ok()) return;  // opened once already
  const int64_t step_1based = completed_step_ + 1;
  model_->set_block_output_hook([&](int layer, const Tensor& x) {
    if (inject_.at(step_1based, FaultInjection::Where::kActivation) && inject_.layer == layer)
      ops::scale_copy(x, x, inject_.value);
    observer(layer, x);
  });
  engine_->forward_only(micro_batches_, o_.micro_batch, fetch_from(*again));
  model_->set_block_output_hook(nullptr);
}

absl::Status Trainer::nonfinite_step(int64_t index, double loss, double grad_norm, bool* skip) {
  const std::string where = diagnose_nonfinite(
      *model_, store_, *grid_, [this](const BlockOutputHook& obs) { replay_forward(obs); });
  const std::string what = absl::StrCat(
      std::isfinite(loss) ? absl::StrCat("the gradient norm is ", grad_norm)
                          : absl::StrCat("the loss is ", loss),
      " at step ", index + 1);
  ++nonfinite_in_row_;
  const bool weights_bad = where.find("parameters with non-finite") != std::string::npos;
  if (o_.on_nonfinite == "skip-step" && !weights_bad && nonfinite_in_row_ < o_.max_nonfinite_steps) {
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
  const ModelConfig& cfg = o_.model;
  if (inject_.at(step_1based, FaultInjection::Where::kWeight) && store_.find(inject_.param) >= 0) {
    ops::add_scalar(store_.param(inject_.param), 0, inject_.value);
    store_.refresh_compute_copy();
  }
  if (inject_.at(step_1based, FaultInjection::Where::kActivation))
    model_->set_block_output_hook([&](int layer, const Tensor& x) {
      if (layer == inject_.layer) ops::scale_copy(x, x, inject_.value);
    });
  store_.zero_grads();
  const float grad_scale = 1.0f / static_cast<float>(o_.global_batch);
  auto layer_grads_done = [&](int layer) { dp_sync_->layer_done(layer); };
  double loss_sum = engine_->train_step(
      micro_batches_, o_.micro_batch, grad_scale, fetch_from(*train_),
      o_.overlap_grad_sync ? std::function<void(int)>(layer_grads_done) : std::function<void(int)>());
  model_->set_block_output_hook(nullptr);
  if (engine_->stopped()) return StepOutcome::kStopped;  // partial gradients: discarded
  sync_gradients(store_, *grid_, *dp_sync_);
  if (inject_.at(step_1based, FaultInjection::Where::kGradient) && store_.find(inject_.param) >= 0)
    ops::add_scalar(store_.grad(inject_.param), 0, inject_.value);
  // Sums over the data-parallel replicas and the pipeline (only the last stage has losses).
  grid_->pp()->all_reduce_sum(&loss_sum, 1);
  grid_->dp()->all_reduce_sum(&loss_sum, 1);
  const double loss = loss_sum / static_cast<double>(o_.global_batch);
  (void)cfg;

  const double grad_norm = opt_->grad_norm();
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    bool skip = false;
    VT_RETURN_IF_ERROR(nonfinite_step(index, loss, grad_norm, &skip));
    completed_step_ = step_1based;  // the data of the step is consumed; no update
    opt_->set_step_count(step_1based);
    tokens_seen_ += o_.global_batch;
    loader_state_ = train_->state_json();
    return StepOutcome::kSkipped;
  }
  nonfinite_in_row_ = 0;
  const double comm_before = comm_seconds_total();
  optim::StepStats st = opt_->step(index, o_.steps, grad_norm);
  completed_step_ = step_1based;
  tokens_seen_ += o_.global_batch;
  loader_state_ = train_->state_json();
  const double comm_s = comm_seconds_total() - comm_before;
  // The pipeline's idle share: seconds the ranks waited for another stage during the step's
  // forwards and backwards, and the seconds they worked, averaged over the pipeline ranks
  // (bench/bench_layouts.py compares wait / busy with the theory (pp-1) / (vpp M)).
  const PipelineEngine::StepTimes& times = engine_->last_step_times();
  double pp_times[2] = {times.wait_s, times.busy_s};
  if (shape_.pp > 1) grid_->pp()->all_reduce_sum(pp_times, 2);
  // And the schedule replayed with the passes' measured times, each rank on a core of its own
  // (replay_step_seconds): the bubble of the schedule itself, apart from ranks sharing cores;
  // against the busiest rank's passes (pp_pass_max_s) it is the critical rank's idle share.
  double pass_s = 0, pass_max_s = 0, replay_s = 0;
  if (shape_.pp > 1) {
    const int64_t n = static_cast<int64_t>(times.pass_s.size());
    std::vector<float> mine(times.pass_s.begin(), times.pass_s.end());
    std::vector<float> all(static_cast<size_t>(n) * shape_.pp);
    grid_->pp()->all_gather(mine.data(), all.data(), n);
    std::vector<std::vector<double>> per_rank(shape_.pp);
    for (int r = 0; r < shape_.pp; ++r) {
      per_rank[r].assign(all.begin() + r * n, all.begin() + (r + 1) * n);
      double sum = 0;
      for (double x : per_rank[r]) sum += x;
      pass_s += sum / shape_.pp;
      pass_max_s = std::max(pass_max_s, sum);
    }
    replay_s = replay_step_seconds(shape_.pp, o_.vpp, micro_batches_, per_rank);
  }
  log_step(step_1based, loss, st, comm_s, pp_times[0] / shape_.pp, pp_times[1] / shape_.pp,
           pass_s, pass_max_s, replay_s);
  return StepOutcome::kApplied;
}

void Trainer::log_step(int64_t done, double loss, const optim::StepStats& st, double comm_s,
                       double pp_wait_s, double pp_busy_s, double pp_pass_s,
                       double pp_pass_max_s, double pp_replay_s) {
  const double t = now_seconds();
  const double tok_per_s = o_.global_batch / std::max(1e-9, t - t_last_);
  const double mfu = flops_per_token_ * tok_per_s / peak_flops_;
  if (o_.profile) {  // the first step (allocations, first touches) is left out
    if (done == first_step_ + 1) {
      op_profile::reset();
    } else {
      profile_wall_ += t - t_last_;
      ++profile_steps_;
    }
  }
  t_last_ = t;
  if (!rank0_) return;
  metrics_.write({{"step", done},
                  {"loss", loss},
                  {"lr", st.matrix_lr},
                  {"tokens", tokens_seen_},
                  {"tok_per_s", tok_per_s},
                  {"mfu", mfu},
                  {"grad_norm", st.grad_norm},
                  {"comm_s", comm_s},
                  {"pp_wait_s", pp_wait_s},
                  {"pp_busy_s", pp_busy_s},
                  {"pp_pass_s", pp_pass_s},
                  {"pp_pass_max_s", pp_pass_max_s},
                  {"pp_replay_s", pp_replay_s},
                  {"device_bytes", device_bytes()},
                  {"device_peak_bytes", device_peak_bytes()}});
  if (done % o_.log_every == 0 || done == o_.steps || done == first_step_ + 1) {
    const double elapsed = t - t_start_;
    const double eta = elapsed / static_cast<double>(done - first_step_) * static_cast<double>(o_.steps - done);
    std::printf("%s\n", progress_line(done, o_.steps, loss, st.matrix_lr, tok_per_s, mfu, eta).c_str());
    if (done == first_step_ + 1 && device_.device != Device::kCPU)
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
  return absl::AbortedError("stopped after saving a checkpoint");
}

absl::Status Trainer::run() {
  first_step_ = completed_step_;
  const std::string signal_stop = "stop signal received";
  // An evaluation the checkpoint marks pending (cut short by a stop, or the final one, which
  // runs after the final checkpoint is saved) runs first.
  if (pending_eval_step_ == completed_step_ && pending_eval_tokens_ > 0) {
    if (rank0_) {
      std::printf("running the evaluation of step %lld that the checkpoint marks pending\n",
                  static_cast<long long>(completed_step_));
    }
    VT_RETURN_IF_ERROR(evaluate(completed_step_, pending_eval_tokens_));
    if (engine_->stopped()) return stop_here(signal_stop + " during an evaluation");
  }
  if (completed_step_ == o_.steps && !resumed_from_.empty()) {
    if (rank0_)
      std::printf("the checkpoint %s is already at --steps %lld: nothing to train\n",
                  resumed_from_.c_str(), static_cast<long long>(o_.steps));
    return absl::OkStatus();
  }
  t_start_ = t_last_ = now_seconds();
  if (o_.profile) {
    profile_clock_ = device_profile_clock(device_);
    op_profile::set_device_clock(profile_clock_.get());
  }
  op_profile::enable(o_.profile);
  if (completed_step_ == 0 && o_.eval_every > 0) {
    VT_RETURN_IF_ERROR(evaluate(0, o_.eval_tokens));
    if (engine_->stopped()) return stop_here(signal_stop);
  }
  for (int64_t index = completed_step_; index < o_.steps; ++index) {
    VT_ASSIGN_OR_RETURN(StepOutcome outcome, train_step(index));
    if (outcome == StepOutcome::kStopped) return stop_here(absl::StrCat(signal_stop, " during step ", index + 1));
    const int64_t done = index + 1;
    if (done == o_.steps) break;
    if (outcome == StepOutcome::kApplied) {
      if (o_.eval_every > 0 && done % o_.eval_every == 0) {
        VT_RETURN_IF_ERROR(evaluate(done, o_.eval_tokens));
        if (engine_->stopped()) return stop_here(signal_stop + " during an evaluation");
        t_last_ = now_seconds();  // the next step's tok/s excludes the evaluation
      }
      if (o_.core_every > 0 && done % o_.core_every == 0) {
        VT_RETURN_IF_ERROR(core(done));
        t_last_ = now_seconds();
      }
      if (o_.sample_every > 0 && done % o_.sample_every == 0 && world_->size() == 1 &&
          device_.device == Device::kCPU) {
        SampleOptions so;
        so.max_tokens = 48;
        so.temperature = 0;
        std::vector<int32_t> prompt = {tokenizer_->bos_id()};
        auto text = tokenizer_->decode(sample(*model_, prompt, so));
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
    if (engine_->stopped()) return stop_here(signal_stop + " during the final evaluation");
  }
  if (o_.core_every > 0) VT_RETURN_IF_ERROR(core(o_.steps));
  if (skipped_steps_ > 0 && rank0_)
    std::printf("%lld step(s) were skipped for non-finite values (--on-nonfinite skip-step)\n",
                static_cast<long long>(skipped_steps_));
  return absl::OkStatus();
}

absl::Status run_train(const TrainOptions& options, Communicator* world) {
  Trainer trainer(options, world);
  VT_RETURN_IF_ERROR(trainer.setup());
  return trainer.run();
}

}  // namespace vt
