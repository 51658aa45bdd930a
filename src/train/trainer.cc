// The training loop (see trainer.h).
#include "train/trainer.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "core/arena.h"
#include "core/backend.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "eval/core_bundle.h"
#include "eval/core_eval.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "optim/optimizer.h"
#include "parallel/comm_watchdog.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pipeline.h"
#include "parallel/process_grid.h"
#include "train/device_setup.h"
#include "train/evaluate.h"
#include "train/memory_estimate.h"
#include "train/metrics.h"

namespace vt {

namespace fs = std::filesystem;

namespace {

// Set by SIGUSR1/SIGTERM (Slurm's warning before the time limit, or scancel): the loop saves a
// checkpoint at the next step boundary and stops with kExitRequeue.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Peak fp32 FLOP/s of the cores this job runs on, for MFU on the CPU backend: per core
// VTRAIN_PEAK_FLOPS_PER_CORE, or 2 AVX2 FMA units x 8 lanes x 2 flops x 2.5 GHz = 80 GFLOP/s
// (a nominal figure, stated in the README); cores = the threads the ranks use, at most the
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

// Resolves --resume to a checkpoint path, or "" to start fresh. `auto` takes the newest
// checkpoint of --ckpt-dir that verifies (a corrupt newest one falls back to the previous).
absl::StatusOr<std::string> resume_path(const TrainOptions& o, const ProcessGrid& grid) {
  if (o.resume == "none") return std::string();
  if (o.resume != "auto") return o.resume;
  if (o.ckpt_dir.empty()) return absl::InvalidArgumentError("--resume auto needs --ckpt-dir");
  // Rank 0 decides, so every rank takes the same (collective) path even while rank 0 is
  // already creating the directory.
  float exists = grid.world()->rank() == 0 && fs::exists(o.ckpt_dir) ? 1.0f : 0.0f;
  grid.world()->broadcast(&exists, 1, 0);
  if (exists == 0.0f) return std::string();
  return find_latest_good(o.ckpt_dir, &grid);
}

using TrainOptimizer = optim::DistributedOptimizer;

// Optimizer states as tensors of each parameter's local shape (ZeRO shards gathered over DP:
// a collective, called by every rank in the same order).
std::vector<NamedTensor> gather_optimizer_states(const ParamStore& store, TrainOptimizer& opt) {
  std::vector<NamedTensor> out;
  for (const ParamInfo& info : store.infos())
    for (const std::string& kind : opt.state_kinds(info.name))
      out.push_back({"/optim/" + info.name + "/" + kind, opt.gather_state(info.name, kind)});
  return out;
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

absl::StatusOr<CheckpointMeta> load_training_state(const std::string& path, const ModelConfig& cfg,
                                                   ParamStore& store, TrainOptimizer& opt,
                                                   const ProcessGrid& grid) {
  std::vector<NamedTensor> states = gather_optimizer_states(store, opt);  // shapes to fill
  // Checkpoints are read into host memory; a device store gets the values copied over.
  ParamStore host = store.device() == Device::kCPU ? store : store.host_mirror();
  VT_ASSIGN_OR_RETURN(CheckpointMeta meta, load_checkpoint(path, cfg, host, states, &grid));
  if (store.device() != Device::kCPU) store.copy_params_from(host);
  store.refresh_compute_copy();
  for (const NamedTensor& t : states) {
    const size_t a = t.path.find('/', 1), b = t.path.rfind('/');
    opt.scatter_state(t.path.substr(a + 1, b - a - 1), t.path.substr(b + 1), t.tensor);
  }
  opt.set_step_count(meta.step);
  return meta;
}

// Rank 0 holds an exclusive flock on <ckpt_dir>/.vtrain.lock for the whole run, so two runs (a
// resumed job and a leftover of the killed one, say) never write one checkpoint directory at
// once. The kernel drops the lock when the process ends, however it ends.
absl::Status lock_checkpoint_dir(const std::string& dir, const ProcessGrid& grid, int* fd_out) {
  float ok = 1.0f;
  std::string why;
  if (grid.world()->rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string lock = (fs::path(dir) / ".vtrain.lock").string();
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ok = 0.0f;
      if (fd >= 0) ::close(fd);
    } else {
      *fd_out = fd;
    }
  }
  grid.world()->broadcast(&ok, 1, 0);
  if (ok == 0.0f)
    return agreed(absl::FailedPreconditionError(absl::StrCat(
        "another vtrain run is using --ckpt-dir ", dir,
        " (it holds .vtrain.lock); stop that run or choose another directory")));
  return absl::OkStatus();
}

}  // namespace

// Bytes the device backend holds now and at most (0 on the CPU).
double device_bytes() {
  return has_backend(Device::kCUDA) ? static_cast<double>(backend(Device::kCUDA).bytes_in_use()) : 0.0;
}
double device_peak_bytes() {
  return has_backend(Device::kCUDA) ? static_cast<double>(backend(Device::kCUDA).peak_bytes()) : 0.0;
}

void install_stop_signal_handlers() {
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

absl::Status run_train(const TrainOptions& options, Communicator* world) {
  TrainOptions o = options;
  const ModelConfig& cfg = o.model;
  // Layout errors are the same on every rank: agreed, so each rank exits with one message.
  auto shape_or = make_grid_shape(world->size(), o.tp, o.pp, cfg);
  if (!shape_or.ok()) return agreed(shape_or.status());
  const GridShape shape = *shape_or;
  const int64_t rows_per_micro = static_cast<int64_t>(o.micro_batch) * shape.dp;  // global rows
  if (o.global_batch == 0) o.global_batch = rows_per_micro * cfg.seq_len;
  if (o.global_batch % (rows_per_micro * cfg.seq_len) != 0)
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o.global_batch, " tokens is not a multiple of micro-batch ",
        o.micro_batch, " x seq-len ", cfg.seq_len, " x data-parallel size ", shape.dp)));
  const int M = static_cast<int>(o.global_batch / (rows_per_micro * cfg.seq_len));
  VT_ASSIGN_OR_RETURN(const DevicePlan device, setup_device(o, world));
  ProcessGrid grid(world, shape);
  VT_ASSIGN_OR_RETURN(const std::string comm_desc, setup_device_comms(o, device, grid));
  const bool rank0 = world->rank() == 0;
  auto [layer_begin, layer_end] = stage_layers(cfg.n_layer, shape.pp, grid.coords().pp);
  ModelParallel par;
  par.tp = grid.tp();
  par.layer_begin = layer_begin;
  par.layer_end = layer_end;
  ParamStore store;
  GPT model(cfg, par);
  model.set_recompute(o.recompute);
  model.register_params(store);
  store.finalize(device.device, device.act_dtype);
  model.init_params(o.seed);
  PipelineEngine engine(model, grid);

  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.muon.lr = o.matrix_lr * o.lr_scale;
  for (optim::AdamWHyper* h : {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table,
                               &oc.adamw.scalar})
    h->lr *= o.lr_scale;
  oc.schedule.warmup_steps = o.warmup_steps;
  oc.schedule.warmdown_frac = o.warmdown_frac;
  oc.max_grad_norm = o.max_grad_norm;
  if (o.polar_express) oc.muon.ns = optim::NsKind::kPolarExpress;
  oc.muon.ns_dtype = o.muon_ns_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  TrainOptimizer opt(&store, oc, grid);
  optim::OverlappedGradSync dp_sync(&store, grid.dp());
  auto layer_grads_done = [&](int layer) { dp_sync.layer_done(layer); };

  data::LoaderOptions lo;
  lo.vocab_size = cfg.vocab_size;
  lo.seed = o.seed;
  VT_ASSIGN_OR_RETURN(data::DataLoader train, data::DataLoader::open(o.data_dir, "train", lo));
  VT_ASSIGN_OR_RETURN(auto tokenizer, data::load_tokenizer(o.data_dir));
  const std::vector<int32_t> token_bytes = data::token_bytes_table(*tokenizer);

  int64_t start_step = 0, tokens_seen = 0;
  int lock_fd = -1;
  if (!o.ckpt_dir.empty()) VT_RETURN_IF_ERROR(lock_checkpoint_dir(o.ckpt_dir, grid, &lock_fd));
  struct FdCloser {
    int fd;
    ~FdCloser() { if (fd >= 0) ::close(fd); }
  } lock_closer{lock_fd};
  VT_ASSIGN_OR_RETURN(std::string resume_from, resume_path(o, grid));
  if (!resume_from.empty()) {
    VT_ASSIGN_OR_RETURN(CheckpointMeta meta, load_training_state(resume_from, cfg, store, opt, grid));
    start_step = meta.step;
    tokens_seen = meta.tokens;
    VT_RETURN_IF_ERROR(train.load_state_json(meta.loader_state));
    if (rank0)
      std::printf("resumed from %s at step %lld\n", resume_from.c_str(),
                  static_cast<long long>(start_step));
  }
  if (!o.ckpt_dir.empty() && rank0) {
    std::error_code ec;
    fs::create_directories(o.ckpt_dir, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create --ckpt-dir ", o.ckpt_dir, ": ", ec.message()));
    VT_RETURN_IF_ERROR(tokenizer->save((fs::path(o.ckpt_dir) / "tokenizer.json").string()));
  }
  MetricsLog metrics;
  if (rank0) VT_RETURN_IF_ERROR(metrics.open(o.metrics_path, start_step > 0));

  double params_global = static_cast<double>(store.total_numel());
  const double fpt = flops_per_token(cfg);
  // MFU's peak: on GPUs the bf16 dense peak of an H100/H200 SXM (989 TFLOP/s per GPU; set
  // VTRAIN_PEAK_TFLOPS for other parts), on CPUs a nominal figure per core.
  const char* peak_env = std::getenv("VTRAIN_PEAK_TFLOPS");
  const double peak = o.device == "cuda"
                          ? (peak_env ? std::atof(peak_env) : 989.0) * 1e12 * world->size()
                          : cpu_peak_flops(world);
  if (rank0) {
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
    std::printf("layout: %d ranks = dp %d x tp %d x pp %d | this stage: layers %d..%d, %.2fM params\n",
                world->size(), shape.dp, shape.tp, shape.pp, layer_begin, layer_end - 1,
                params_global / 1e6);
    std::printf("batch: %lld tokens/step = %d rows x %d tokens x dp %d x %d micro-batches; %lld steps\n",
                static_cast<long long>(o.global_batch), o.micro_batch, cfg.seq_len, shape.dp, M,
                static_cast<long long>(o.steps));
    std::printf("device: %s | communication: %s\n", device.description.c_str(),
                comm_desc.c_str());
    std::printf("memory estimate (rank 0): %s\n",
                estimate_memory(cfg, store, shape, grid.coords(), layer_end - layer_begin,
                                o.micro_batch, device.act_dtype, o.recompute)
                    .to_string()
                    .c_str());
    std::fflush(stdout);
  }

  auto save = [&](int64_t step) -> absl::Status {
    if (o.ckpt_dir.empty()) return absl::OkStatus();
    CheckpointMeta meta;
    meta.step = step;
    meta.tokens = tokens_seen;
    meta.loader_state = train.state_json();
    meta.extra = o.to_json();
    std::vector<NamedTensor> states = gather_optimizer_states(store, opt);
    // Checkpoints are written from host memory: a device store is copied out first.
    const ParamStore host = store.device() == Device::kCPU ? store : store.host_mirror();
    VT_ASSIGN_OR_RETURN(std::string path, save_checkpoint_in_dir(o.ckpt_dir, step, cfg, host, meta,
                                                                 states, &grid, o.keep_last));
    if (rank0) std::printf("saved checkpoint %s\n", path.c_str());
    return absl::OkStatus();
  };
  // Sums over the data-parallel replicas and the pipeline (only the last stage has losses).
  auto reduce_replicas = [&](double* v, int n) {
    grid.pp()->all_reduce_sum(v, n);
    grid.dp()->all_reduce_sum(v, n);
  };
  auto run_eval = [&](int64_t step) -> absl::Status {
    VT_ASSIGN_OR_RETURN(EvalResult r, evaluate(engine, grid, o.data_dir, o.micro_batch,
                                               o.eval_tokens, token_bytes));
    if (rank0) {
      std::printf("eval step %lld | val loss %.4f | val bpb %.4f (%lld tokens)\n",
                  static_cast<long long>(step), r.loss, r.bpb, static_cast<long long>(r.tokens));
      metrics.write({{"step", step}, {"val_loss", r.loss}, {"val_bpb", r.bpb}});
      std::fflush(stdout);
    }
    return absl::OkStatus();
  };

  // CORE during training: the bundle is read once; scores go to stdout and the metrics log.
  std::vector<eval::CoreTask> core_tasks;
  if (o.core_every > 0) {
    auto tasks = eval::load_core_bundle(o.core_dir, static_cast<int>(o.core_max_per_task));
    if (!tasks.ok()) return agreed(tasks.status());
    core_tasks = std::move(*tasks);
  }
  auto run_core = [&](int64_t step) -> absl::Status {
    auto progress = [&](const std::string& line) {
      if (rank0) std::printf("%s\n", line.c_str());
    };
    VT_ASSIGN_OR_RETURN(eval::CoreResult r, eval::evaluate_core(model, grid, core_tasks, *tokenizer, progress));
    if (rank0) {
      nlohmann::json centered = nlohmann::json::object(), accuracy = nlohmann::json::object();
      for (const eval::CoreTaskResult& t : r.tasks) {
        centered[t.label] = t.centered;
        accuracy[t.label] = t.accuracy;
      }
      std::printf("core step %lld | CORE %.4f (%zu tasks)\n", static_cast<long long>(step), r.core, r.tasks.size());
      metrics.write({{"step", step}, {"core", r.core}, {"core_centered", centered}, {"core_accuracy", accuracy}});
      std::fflush(stdout);
    }
    return absl::OkStatus();
  };

  const int64_t B = o.micro_batch, T = cfg.seq_len;
  auto fetch_train = [&](int, int32_t* in, int32_t* tg) {
    absl::Status st = train.next_batch_into(rows_per_micro, T, grid.coords().dp, shape.dp, in, tg);
    if (!st.ok()) abort_job(std::string(st.message()));
  };
  const double t_start = now_seconds();
  double t_last = t_start;
  if (start_step == 0 && o.eval_every > 0) VT_RETURN_IF_ERROR(run_eval(0));
  for (int64_t step = start_step; step < o.steps; ++step) {
    const double comm_before = comm_seconds_total();
    store.zero_grads();
    const float grad_scale = 1.0f / static_cast<float>(o.global_batch);
    double loss_sum = engine.train_step(
        M, static_cast<int>(B), grad_scale, fetch_train,
        o.overlap_grad_sync ? std::function<void(int)>(layer_grads_done) : std::function<void(int)>());
    sync_gradients(store, grid, dp_sync);
    reduce_replicas(&loss_sum, 1);
    const double loss = loss_sum / static_cast<double>(o.global_batch);
    if (!std::isfinite(loss))
      return absl::InternalError(absl::StrCat("loss became ", loss, " at step ", step + 1,
                                              "; lower the learning rate (--lr-scale) or enable "
                                              "--max-grad-norm"));
    optim::StepStats st = opt.step(step, o.steps);
    tokens_seen += o.global_batch;
    const int64_t done = step + 1;
    const double t = now_seconds();
    const double tok_per_s = o.global_batch / std::max(1e-9, t - t_last);
    const double mfu = fpt * tok_per_s / peak;
    t_last = t;
    if (rank0) {
      metrics.write({{"step", done},
                     {"loss", loss},
                     {"lr", st.matrix_lr},
                     {"tokens", tokens_seen},
                     {"tok_per_s", tok_per_s},
                     {"mfu", mfu},
                     {"grad_norm", st.grad_norm},
                     {"comm_s", comm_seconds_total() - comm_before},
                     {"device_bytes", device_bytes()},
                     {"device_peak_bytes", device_peak_bytes()}});
      if (done % o.log_every == 0 || done == o.steps || done == start_step + 1) {
        const double elapsed = t - t_start;
        const double eta = elapsed / (done - start_step) * (o.steps - done);
        std::printf("%s\n", progress_line(done, o.steps, loss, st.matrix_lr, tok_per_s, mfu, eta).c_str());
        if (done == start_step + 1 && device.device != Device::kCPU)
          std::printf("device memory after the first step: %.2f GiB in use, peak %.2f GiB\n",
                      device_bytes() / 1073741824.0, device_peak_bytes() / 1073741824.0);
        std::fflush(stdout);
      }
    }
    if (o.eval_every > 0 && done % o.eval_every == 0 && done != o.steps) {
      VT_RETURN_IF_ERROR(run_eval(done));
      t_last = now_seconds();  // the next step's tok/s excludes the evaluation
    }
    if (o.core_every > 0 && done % o.core_every == 0 && done != o.steps) {
      VT_RETURN_IF_ERROR(run_core(done));
      t_last = now_seconds();
    }
    if (o.sample_every > 0 && done % o.sample_every == 0 && world->size() == 1 &&
        device.device == Device::kCPU) {
      SampleOptions so;
      so.max_tokens = 48;
      so.temperature = 0;
      std::vector<int32_t> prompt = {tokenizer->bos_id()};
      auto text = tokenizer->decode(sample(model, prompt, so));
      std::printf("sample: %s\n", text.ok() ? text->c_str() : "<undecodable>");
    }
    if (o.ckpt_every > 0 && done % o.ckpt_every == 0 && done != o.steps) VT_RETURN_IF_ERROR(save(done));
    // Every rank must agree to stop at the same step, whichever received the signal.
    double stop = g_stop_signal + (done == o.stop_at_step ? 1 : 0);
    world->all_reduce_sum(&stop, 1);
    if (stop > 0 && done != o.steps) {
      if (!(o.ckpt_every > 0 && done % o.ckpt_every == 0)) VT_RETURN_IF_ERROR(save(done));
      if (rank0)
        std::printf("stop signal received: checkpoint of step %lld saved, exiting with code %d "
                    "so the job can be requeued and resumed\n",
                    static_cast<long long>(done), kExitRequeue);
      std::fflush(stdout);
      return absl::AbortedError("stopped by signal after saving a checkpoint");
    }
  }
  VT_RETURN_IF_ERROR(run_eval(o.steps));
  if (o.core_every > 0) VT_RETURN_IF_ERROR(run_core(o.steps));
  VT_RETURN_IF_ERROR(save(o.steps));
  return absl::OkStatus();
}

}  // namespace vt
