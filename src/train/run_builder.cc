// Building a training run in phases (see run_builder.h).
#include "train/run_builder.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/rng.h"
#include "data/mixture.h"
#include "data/data_fingerprint.h"
#include "model/flops.h"
#include "model/model_split.h"
#include "parallel/failure.h"
#include "plan/memory_estimate.h"
#include "train/metrics.h"
#include "train/optimizer_setup.h"
#include "train/preflight.h"
#include "data/tokenizer_files.h"

namespace vt {

namespace fs = std::filesystem;

namespace {

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

// Phase 1: the layout against the world and the model, and the batch against the layout (the
// same on every rank: agreed, so each rank exits with one message).
absl::Status check_batch(TrainOptions& o, Run& r) {
  const ModelConfig& cfg = o.model;
  auto shape_or = make_grid_shape(r.world->size(), o.tp, o.pp, model_split(cfg));
  if (!shape_or.ok()) return agreed(shape_or.status());
  r.shape = *shape_or;
  r.rows_per_micro = static_cast<int64_t>(o.micro_batch) * r.shape.dp;  // global rows
  if (o.global_batch == 0) o.global_batch = r.rows_per_micro * cfg.seq_len;
  if (o.global_batch % (r.rows_per_micro * cfg.seq_len) != 0)
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o.global_batch, " tokens is not a multiple of micro-batch ",
        o.micro_batch, " x seq-len ", cfg.seq_len, " x data-parallel size ", r.shape.dp)));
  // Derived from the flags, in 64 bits, before anything is sized by it.
  const int64_t micro = o.global_batch / (r.rows_per_micro * cfg.seq_len);
  if (micro > kMaxMicroBatches)
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o.global_batch, " tokens makes ", micro,
        " micro-batches per step and data-parallel rank (micro-batch ", o.micro_batch,
        " x seq-len ", cfg.seq_len, " x data-parallel size ", r.shape.dp, " = ",
        r.rows_per_micro * cfg.seq_len, " tokens each), above vtrain's limit of ",
        kMaxMicroBatches, "; lower --global-batch or raise --micro-batch")));
  r.micro_batches = static_cast<int>(micro);
  if (absl::Status fit = data::check_stages_fit(o.data, o.steps * o.global_batch, cfg.seq_len); !fit.ok())
    return agreed(fit);
  absl::Status st = check_virtual_stages(cfg.n_layer, r.shape.pp, o.vpp, r.micro_batches);
  if (!st.ok()) return agreed(st);
  std::vector<std::pair<std::string, std::string>> dirs = {{o.data_dir, "--data"},
                                                           {o.ckpt_dir, "--ckpt-dir"}};
  if (o.resume != "none" && o.resume != "auto")
    dirs.emplace_back(fs::path(o.resume).parent_path().string(), "--resume checkpoint's");
  absl::Status sinks = absl::OkStatus();
  if (r.rank0) {
    sinks = check_metrics_path(o.metrics_path, o.resume != "none", dirs);
    std::string warning;
    if (sinks.ok() && !o.tensorboard_dir.empty())
      sinks = check_tensorboard_dir(o.tensorboard_dir, o.resume != "none", o.run_identity(), &warning);
    if (sinks.ok() && !warning.empty()) std::printf("warning: %s\n", warning.c_str());
  }
  // --metrics and --tensorboard before anything is made or written (rank 0 writes them; its
  // view is agreed).
  return all_ok(r.world, sinks);
}

// Phase 2: the device, the process grid and its communicators, this rank's layers.
absl::Status place(const TrainOptions& o, Run& r) {
  VT_ASSIGN_OR_RETURN(r.inject, FaultInjection::from_env());
  VT_ASSIGN_OR_RETURN(r.device, setup_device(o, r.world));
  r.grid = std::make_unique<ProcessGrid>(r.world, r.shape);
  VT_ASSIGN_OR_RETURN(r.comm_desc, setup_device_comms(o, r.device, *r.grid));
  r.chunks = virtual_stage_layers(o.model.n_layer, r.shape.pp, o.vpp, r.grid->coords().pp);
  return absl::OkStatus();
}

// --fp8 e4m3 refused by name where the blocks' linear GEMMs cannot run in FP8: a GPU without FP8
// tensor cores (compute capability below 8.9), or a GEMM inner dimension that is not a multiple
// of 16 (cuBLASLt's FP8 rule, kept by the CPU's fake quantization too): the forward's input
// features, the data gradient's output features, the weight gradient's micro-batch tokens.
absl::Status check_fp8(const TrainOptions& o, const Run& r) {
  if (o.fp8 != "e4m3") return absl::OkStatus();
  if (r.device.device == Device::kCUDA) {
    const int cc = cuda_compute_capability();
    if (cc < 89)
      return absl::InvalidArgumentError(absl::StrCat(
          "--fp8 e4m3: this GPU (compute capability ", cc / 10, ".", cc % 10,
          ") has no FP8 tensor cores (8.9 and above: Ada, Hopper); run with --fp8 off"));
  }
  const ModelConfig& c = o.model;
  const int tp = r.shape.tp;
  const std::pair<const char*, int64_t> dims[] = {
      {"--dim (the width)", c.n_embd},
      {"the query width per tensor-parallel rank (--heads x --head-dim / --tp)", c.q_dim() / tp},
      {"the key/value width per tensor-parallel rank (--kv-heads x --head-dim / --tp)",
       c.kv_dim() / tp},
      {"the MLP's hidden width per tensor-parallel rank (its ratio x --dim / --tp)",
       c.mlp_hidden() / tp},
      {"the micro-batch's tokens (--micro-batch x --seq-len)",
       int64_t{o.micro_batch} * c.seq_len}};
  for (const auto& [what, n] : dims)
    if (n % 16 != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--fp8 e4m3: ", what, " is ", n, ", not a multiple of 16: an FP8 GEMM's inner "
          "dimension must be (cuBLASLt's rule); change it or run with --fp8 off"));
  return absl::OkStatus();
}

// Phase 3: the model of this rank's layers, its parameters registered (not yet allocated), and
// the memory estimate checked against the device before anything large is allocated.
absl::Status build_model(const TrainOptions& o, Run& r) {
  ModelParallel par;
  par.tp = r.grid->tp();
  par.layer_begin = r.chunks.front().first;
  par.layer_end = r.chunks.back().second;
  if (o.vpp > 1) par.chunks = r.chunks;
  r.model = std::make_unique<GPT>(o.model, par);
  r.model->set_recompute(o.recompute);
  VT_RETURN_IF_ERROR(check_fp8(o, r));
  r.model->set_fp8(o.fp8 == "e4m3");
  if (o.fp8 == "e4m3" && r.device.device == Device::kCPU && r.rank0)
    std::printf("fp8: e4m3 on the CPU is a fake quantization (the GPU path's values, fp32 "
                "GEMMs): numerics only; its tok/s and MFU say nothing about FP8 speed\n");
  if (o.table_offload) r.store.keep_in_host_memory(ParamGroup::kValueTable);
  r.model->register_params(r.store);
  int held_layers = 0;
  for (const auto& [b, e] : r.chunks) held_layers += e - b;
  const MemoryEstimate mem = estimate_memory(o.model, r.store, r.shape, r.grid->coords(), held_layers,
                                             o.micro_batch, r.device.act_dtype, o.recompute, o.vpp,
                                             r.micro_batches, o.grad_sync == DType::kBF16,
                                             o.fp8 == "e4m3", o.zero);
  r.memory_line = mem.to_string();
  return check_memory_fits(mem, o, r.shape, r.grid->coords().pp, r.device.device,
                           r.device.act_dtype, r.world);
}

}  // namespace

absl::StatusOr<std::unique_ptr<data::BatchSource>> open_train_source(const TrainOptions& o) {
  data::LoaderOptions lo;
  lo.vocab_size = o.model.vocab_size;
  lo.seed = o.seed;
  if (o.data.is_mixture()) {
    VT_ASSIGN_OR_RETURN(data::MixtureLoader m, data::MixtureLoader::open(o.data, "train", lo));
    return std::unique_ptr<data::BatchSource>(std::make_unique<data::MixtureLoader>(std::move(m)));
  }
  VT_ASSIGN_OR_RETURN(data::DataLoader d, data::DataLoader::open(o.data_dir, "train", lo));
  return std::unique_ptr<data::BatchSource>(std::make_unique<data::DataLoader>(std::move(d)));
}

namespace {

// Phase 4: the data: the training shards' ids, the tokenizer and the data's fingerprint, the
// validation split against what evaluations read, the CORE bundle.
absl::Status open_data(const TrainOptions& o, Run& r) {
  const ModelConfig& cfg = o.model;
  // Every rank reads the directory itself, so a file missing or different on one node is that
  // rank's error alone: all_ok gives it to every rank (rank 0 prints it) instead of leaving the
  // others waiting in the next collective.
  auto train = open_train_source(o);
  VT_RETURN_IF_ERROR(all_ok(r.world, train.status()));
  r.train = std::move(*train);
  auto tok = data::load_tokenizer(o.data_dir);
  VT_RETURN_IF_ERROR(all_ok(r.world, tok.status()));
  r.tokenizer = std::move(*tok);
  // What the checkpoints record as this run's data (data/data_fingerprint.h).
  auto fp = data::data_fingerprint((fs::path(o.data_dir) / data::kTokenizerFile).string(),
                                   r.train->shard_paths());
  VT_RETURN_IF_ERROR(all_ok(r.world, fp.status()));
  r.data_fingerprint = *fp;
  r.token_bytes = data::token_bytes_table(*r.tokenizer);
  if (o.global_batch > r.train->tokens_per_epoch())
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", o.global_batch, " tokens per step is more than the ",
        r.train->tokens_per_epoch(), " training tokens of ", o.data.is_mixture() ? "the mixture" : o.data_dir,
        " (one step would read the data more than once); lower --global-batch to at most ",
        r.train->tokens_per_epoch() / (r.rows_per_micro * cfg.seq_len) * r.rows_per_micro * cfg.seq_len)));
  VT_RETURN_IF_ERROR(check_train_ids(*r.train, r.world));
  const int64_t eval_tokens = std::max(o.eval_every > 0 ? o.eval_tokens : 0, o.final_eval_tokens);
  if (eval_tokens > 0) {
    // The flag that set the larger evaluation (--final-eval-tokens defaults to --eval-tokens).
    const std::string size_flag =
        o.final_eval_tokens == eval_tokens && o.final_eval_tokens != o.eval_tokens
            ? "--final-eval-tokens"
            : "--eval-tokens";
    absl::Status st;
    for (const data::MixtureSource& s : o.data.sources)  // each source's split is evaluated
      if (st.ok())
        st = check_eval_split(s.dir, cfg.vocab_size, cfg.seq_len, o.micro_batch, r.shape.dp,
                              eval_tokens, r.world, size_flag);
    if (!st.ok())
      return agreed(absl::Status(st.code(), absl::StrCat(st.message(),
                                                         o.eval_every > 0 ? "" : "; or pass --final-eval-tokens 0 to train without evaluating")));
  }
  if (o.core_every > 0) {
    auto tasks = eval::load_core_bundle(o.core_dir, static_cast<int>(o.core_max_per_task));
    VT_RETURN_IF_ERROR(all_ok(r.world, tasks.status()));
    r.core_tasks = std::move(*tasks);
  }
  return absl::OkStatus();
}

// Phase 5: allocation and init of the parameters, the pipeline engine, the optimizer and the
// data-parallel gradient sums.
void build_optimizer(const TrainOptions& o, Run& r) {
  r.store.finalize(r.device.device, r.device.act_dtype);
  r.model->init_params(o.seed);
  // Deferred gradient zeroing: the GEMM-written gradients are overwritten by their step's first
  // weight-gradient GEMM (beta = 0) instead of zeroed (ParamStore::set_overwrite_first). Not
  // under --cuda-graphs micro-step or step: a captured micro-step replays its GEMMs' beta as
  // captured.
  if (o.cuda_graphs == "off") r.store.set_overwrite_first(r.model->gemm_written_grads());
  r.engine = std::make_unique<PipelineEngine>(*r.model, *r.grid);
  const optim::OptimizerConfig oc = optimizer_config(o);
  r.opt = std::make_unique<optim::DistributedOptimizer>(&r.store, oc, *r.grid, o.zero);
  r.dp_sync = std::make_unique<optim::OverlappedGradSync>(
      &r.store, r.grid->dp(), int64_t{4} << 20, o.grad_sync);
}

// Phase 6: the checkpoint directory, locked, and its writer.
absl::Status open_checkpoint_dir(const TrainOptions& o, Run& r) {
  if (o.ckpt_dir.empty()) return absl::OkStatus();
  VT_ASSIGN_OR_RETURN(r.lock, CheckpointDirLock::acquire(o.ckpt_dir, *r.grid));
  VT_ASSIGN_OR_RETURN(r.writer, CheckpointWriter::create(r.world, *r.grid, o.ckpt_dir, o.keep_last,
                                                         o.async_save));
  return absl::OkStatus();
}

// Phase 7: MFU's terms. The peak: on GPUs the bf16 dense peak of an H100/H200 SXM (989 TFLOP/s
// per GPU; set VTRAIN_PEAK_TFLOPS for other parts), on CPUs a nominal figure per core.
void set_mfu_terms(const TrainOptions& o, Run& r) {
  r.flops_per_token = flops_per_token(o.model);
  const char* peak_env = std::getenv("VTRAIN_PEAK_TFLOPS");
  r.peak_flops = o.device == RunDevice::kCUDA
                     ? (peak_env ? std::atof(peak_env) : 989.0) * 1e12 * r.world->size()
                     : cpu_peak_flops(r.world);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Run>> build_run(TrainOptions& o, Communicator* world) {
  auto r = std::make_unique<Run>();
  r->world = world;
  r->rank0 = world->rank() == 0;
  VT_RETURN_IF_ERROR(check_batch(o, *r));
  VT_RETURN_IF_ERROR(place(o, *r));
  VT_RETURN_IF_ERROR(build_model(o, *r));
  VT_RETURN_IF_ERROR(open_data(o, *r));
  build_optimizer(o, *r);
  VT_RETURN_IF_ERROR(open_checkpoint_dir(o, *r));
  set_mfu_terms(o, *r);
  return r;
}

}  // namespace vt
