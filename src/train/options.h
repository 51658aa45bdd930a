// The options of a training run (docs/design.md "CLI"): what `vtrain train` parsed from its flags
// and --config file (cli/train_flags.h) with the finalized ModelConfig, and the limits on
// quantities the flags make together. Which flag fills which field, and which fields are saved
// with a checkpoint, is the settings table's (train/settings.h).
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/flags.h"
#include "data/mixture.h"
#include "model/config.h"
#include "model/recompute.h"
#include "nlohmann/json.hpp"
#include "optim/muon.h"
#include "optim/schedule.h"

namespace vt {

// The enumerated options. Their spellings on the command line, in a --config file and in the
// saved options JSON are the settings table's (train/settings.cc), nowhere else.
enum class OptimizerKind { kMuon, kAdamW };         // --optimizer
enum class CoefOptim { kPaper, kVtrain };            // --coef-optim
enum class NanochatScale { kNone, kNanochat };       // --lr-batch-scale, --muon-wd-scale
enum class OnNonfinite { kStop, kSkipStep };         // --on-nonfinite
enum class RunDevice { kCPU, kCUDA, kEmulated };     // --device
enum class DeviceComm { kAuto, kNccl, kMpi };        // --device-comm

// Limits on quantities derived from the flags (each flag has its own range; these bound what the
// flags make together). Micro-batches per optimizer step and data-parallel rank (a pipeline
// schedule and the gradient accumulation are sized by it), and the tokens a whole run reads
// (--steps x --global-batch, counted in int64).
inline constexpr int64_t kMaxMicroBatches = 65536;
inline constexpr int64_t kMaxRunTokens = int64_t{1} << 60;

struct TrainOptions {
  std::string data_dir;     // one directory, or a mixture's first source (its tokenizer)
  data::MixtureSpec data;   // --data / --data-stage (data/mixture.h); one unnamed source if plain
  ModelConfig model;        // finalized, vocabulary from the data
  int tp = 1, pp = 1;
  int vpp = 1;              // model chunks (virtual stages) per pipeline rank: interleaved 1F1B
  int micro_batch = 4;      // rows of seq_len tokens per forward/backward
  int64_t global_batch = 0; // tokens per optimizer step (0: one micro-batch per dp rank)
  int64_t steps = 100;
  int64_t eval_every = 0;   // 0: only at the end
  int64_t eval_tokens = 65536;
  int64_t final_eval_tokens = 65536;  // the evaluation after the last step (0: none)
  std::string ckpt_dir;
  int64_t ckpt_every = 0;   // 0: only at the end (when ckpt_dir is set)
  int64_t stop_at_step = 0; // > 0: save and stop after this step, as on a stop signal
  int keep_last = 3;        // checkpoints kept in ckpt_dir (0: all)
  std::string resume = "none";  // auto | PATH | none
  std::string metrics_path;
  std::string tensorboard_dir;  // --tensorboard: event files of every metric (rank 0)
  uint64_t seed = 1337;
  double matrix_lr = 0.02;
  double scalar_lr = 0.5;
  double gain_lr = 0.01;
  double lr_scale = 1.0;    // multiplies every group's peak lr
  int64_t warmup_steps = 40;
  double warmdown_frac = 0.65;
  double max_grad_norm = 0.0;
  double final_lr_frac = 0.05;  // lr multiplier at the end of the warmdown
  // --optimizer: muon (Muon for the block matrices, AdamW groups for the rest) or adamw (one
  // AdamW for every parameter: lr adamw_lr, betas (0.9, 0.999), eps 1e-8, decoupled weight
  // decay weight_decay on all but the gains and scalars; the SAS paper's optimizer).
  OptimizerKind optimizer = OptimizerKind::kMuon;
  double adamw_lr = 1e-3;
  double weight_decay = 0.1;
  bool polar_express = false;
  double muon_wd = 0.0;                       // Muon weight decay (docs/model.md)
  optim::MuonWdStyle muon_wd_style = optim::MuonWdStyle::kDecoupled;  // nanochat: cautious, cosine
  NanochatScale muon_wd_scale = NanochatScale::kNone;  // nanochat: base_train's batch/horizon scaling
  optim::MomentumSchedule muon_momentum = optim::MomentumSchedule::kWarmup;
  // none | nanochat: every group's lr but the smear gate's and the gains' times
  // sqrt(global_batch / 2^19), as nanochat's base_train.py (train/optimizer_setup.h).
  NanochatScale lr_batch_scale = NanochatScale::kNone;
  // paper | vtrain: the value paths' and DenseFormer's coefficients in the groups their papers'
  // code trains them with, or all in the scalar group (docs/model.md "Optimizer groups").
  CoefOptim coef_optim = CoefOptim::kPaper;
  int64_t log_every = 1;
  int64_t health_every = 50;     // per-rank health report every N steps (train/rank_health.h)
  double straggler_margin = 0.2, straggler_min_s = 0.02;
  int64_t sample_every = 0; // 0: never; prints a short greedy sample on rank 0
  int64_t core_every = 0;   // > 0: the CORE score (--core DIR) every N steps and at the end
  std::string core_dir;     // the CORE eval bundle (eval/core_bundle.h)
  int64_t core_max_per_task = 500;  // examples per CORE task during training (-1: all)
  // Where the model runs: cpu, cuda (one GPU per rank) or emulated (the device emulator: the
  // GPU code path on the CPU, for tests). act_dtype: f32 or bf16 activations (default bf16 on
  // cuda/emulated, f32 on cpu). device_comm: how device tensors travel between ranks: nccl,
  // mpi (staged through host memory) or auto (nccl when every rank of a node has its own GPU).
  RunDevice device = RunDevice::kCPU;
  DType act_dtype = DType::kF32;
  DeviceComm device_comm = DeviceComm::kAuto;
  bool table_offload = false;  // value tables and their AdamW states in host memory
  Recompute recompute = Recompute::kOff;  // --recompute: what backward reruns (model/recompute.h)
  // --fp8: off, or e4m3 (the blocks' linear GEMMs in FP8: model/linear.h; on the CPU a fake
  // quantization with the same values, for numerics, not speed).
  std::string fp8 = "off";
  bool profile = false;    // per-op host time per step, printed at the end (core/op_profile.h)
  bool overlap_grad_sync = true;
  // --cuda-graphs: off, micro-step (each micro-batch's forward + backward replayed from a CUDA
  // graph after an eager first step; train/graph_micro_steps.h says where it applies) or step
  // (the optimizer step too: train/graph_optimizer_step.h).
  std::string cuda_graphs = "off";
  // --grad-sync: the data-parallel gradient sum's wire format, fp32 or bf16 (each rank's
  // gradient rounded to bf16, fp32 additions rounded to bf16; optim/grad_sync.h).
  DType grad_sync = DType::kF32;
  // --zero: the ZeRO stage of the data-parallel optimizer (optim/distributed_optimizer.h).
  // 1: gradients all-reduced whole (grad_sync.h), optimizer states sharded; 2: gradients
  // reduce-scattered into the owners of the optimizer states (half the all-reduce's bytes).
  int zero = 1;
  DType muon_ns_dtype = DType::kF32;  // f32 | bf16 (default: bf16 on cuda, else f32)
  bool skip_memory_check = false;  // start even when the estimate exceeds free memory
  double memory_limit_gib = 0;  // > 0: the memory the start-up check counts as free (per
                                // device with a CUDA device, else per host)
  bool allow_other_data = false;  // resume on data other than the checkpoint's (fingerprint)
  bool async_save = false;  // write checkpoints in the background (train/checkpoint_writer.h)
  OnNonfinite on_nonfinite = OnNonfinite::kStop;
  std::string recipe = "vtrain";           // --recipe (cli/recipes.h)
  std::vector<std::string> recipe_flags;   // the flags it filled in, "--flag value"
  int64_t max_nonfinite_steps = 3;    // skip-step: stop after this many in a row
  // The command line as given (the binary and its arguments): the run summary's resume line.
  // Not an option of the run: not in to_json().
  std::vector<std::string> command;

  int64_t tokens_per_micro() const { return static_cast<int64_t>(micro_batch) * model.seq_len; }
  // The saved options (checkpoints' meta, --tensorboard's text): the settings table's rows with
  // a saved key (train/settings.h), and the data sources.
  nlohmann::json to_json() const;
  // The run's name in a --tensorboard directory (tensorboard.h vtrain_run.json): --ckpt-dir made
  // absolute (its links resolved), else the directory of --resume PATH, else "" (a run that
  // cannot be resumed).
  std::string run_identity() const;
};

}  // namespace vt
