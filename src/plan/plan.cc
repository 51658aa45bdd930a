// The layouts of `vtrain plan`, their memory and their cost (see plan.h).
#include "plan/plan.h"
#include "model/model_split.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/arena.h"
#include "core/check.h"
#include "core/communicator.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "parallel/process_grid.h"

namespace vt::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A communicator that only reports a size: parameter registration asks for the TP rank and size.
class SizeOnly final : public Communicator {
 public:
  explicit SizeOnly(int size) : size_(size) {}
  int size() const override { return size_; }
  int rank() const override { return 0; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float*, float*, int64_t) override {}
  void reduce_scatter_sum(const float*, float*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void send(const float*, int64_t, int, int) override {}
  void recv(float*, int64_t, int, int) override {}
  void barrier() override {}

 private:
  int size_;
};

// The parameters stage `stage` of a tp x pp layout registers (nothing is allocated).
ParamStore stage_store(const ModelConfig& cfg, int tp, int pp, int stage, bool table_offload) {
  SizeOnly comm(tp);
  auto [begin, end] = stage_layers(cfg.n_layer, pp, stage);
  ModelParallel par;
  par.tp = &comm;
  par.layer_begin = begin;
  par.layer_end = end;
  GPT model(cfg, par);
  ParamStore store;
  if (table_offload) store.keep_in_host_memory(ParamGroup::kValueTable);
  model.register_params(store);
  return store;
}

// --recompute of `vtrain plan` as the modes to enumerate (plan.h PlanInput::recompute).
absl::StatusOr<std::vector<Recompute>> recompute_modes(const std::string& choice) {
  if (choice == "both") return std::vector<Recompute>{Recompute::kOff, Recompute::kBlock};
  if (choice == "on") return std::vector<Recompute>{Recompute::kBlock};
  if (choice == "all")
    return std::vector<Recompute>{Recompute::kOff, Recompute::kMlp, Recompute::kAttn,
                                  Recompute::kBlock};
  auto r = parse_recompute(choice);
  if (!r.ok())
    return absl::InvalidArgumentError(absl::StrCat(
        "--recompute '", choice, "' is not a choice: both, on, off, all, attn, mlp or block"));
  return std::vector<Recompute>{*r};
}

// ", recompute MODE" for messages ("" without).
std::string recompute_note(Recompute r) {
  return r == Recompute::kOff ? "" : absl::StrCat(", recompute ", recompute_name(r));
}

// Recomputation modes from the least rerun work to the most.
int rerun_rank(Recompute r) {
  switch (r) {
    case Recompute::kOff: return 0;
    case Recompute::kMlp: return 1;
    case Recompute::kAttn: return 2;
    case Recompute::kBlock: return 3;
  }
  return 4;
}

// The planner's order of fitting layouts: fewest days; ties: less recomputation, larger
// micro-batches, less memory.
bool by_days(const LayoutPlan& a, const LayoutPlan& b) {
  if (a.days != b.days) return a.days < b.days;
  if (a.layout.recompute != b.layout.recompute)
    return rerun_rank(a.layout.recompute) < rerun_rank(b.layout.recompute);
  if (a.layout.micro_batch != b.layout.micro_batch)
    return a.layout.micro_batch > b.layout.micro_batch;
  return a.per_gpu() < b.per_gpu();
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

}  // namespace

absl::StatusOr<GpuSpec> gpu_spec(const std::string& kind, double memory_gib, double tflops) {
  if (kind == "h100") return GpuSpec{"h100", 81559.0 / 1024, 989, true, 3.35};
  if (kind == "h200") return GpuSpec{"h200", 143771.0 / 1024, 989, true, 4.8};
  if (kind == "a100-80") return GpuSpec{"a100-80", 80, 312, false, 2.039};
  if (kind == "custom") {
    if (!(memory_gib > 0) || !(tflops > 0))
      return absl::InvalidArgumentError(
          "--gpu custom needs --gpu-memory-gib and --gpu-tflops (both > 0)");
    return GpuSpec{"custom", memory_gib, tflops};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --gpu '", kind, "'; choose h100, h200, a100-80 or custom"));
}

double fp8_flops_share(const ModelConfig& cfg) {
  const double lm_head = static_cast<double>(cfg.n_embd) * cfg.vocab_size;
  return 6.0 * (static_cast<double>(matmul_params(cfg)) - lm_head) / flops_per_token(cfg);
}

double fp8_quant_elements_per_token_layer(const ModelConfig& cfg, int tp) {
  const double C = cfg.n_embd, q = cfg.q_dim() / double(tp), kv = cfg.kv_dim() / double(tp),
               F = cfg.mlp_hidden() / double(tp), qkv = q + 2 * kv;
  const double forward = C + q + C + F;       // inputs of qkv, attn_out, fc, mlp_out
  const double data_grad = qkv + C + F + C;   // their output gradients
  const double weight_grad = forward + data_grad;
  return forward + data_grad + weight_grad;
}

absl::Status check_fp8_gpu(const PlanInput& in) {
  if (!in.fp8 || in.gpu.fp8) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--fp8 e4m3 with --gpu ", in.gpu.name,
      in.gpu.name == "custom" ? ": a custom GPU's FP8 rate and HBM bandwidth are not known"
                              : ": this GPU has no FP8 tensor cores",
      "; plan FP8 on h100 or h200, or drop --fp8"));
}

std::vector<MemoryEstimate> stage_memory(const PlanInput& in, const Layout& l) {
  GridShape shape;
  shape.tp = l.tp;
  shape.pp = l.pp;
  shape.dp = l.dp;
  std::vector<MemoryEstimate> out;
  for (int s = 0; s < l.pp; ++s) {
    const ParamStore store = stage_store(in.cfg, l.tp, l.pp, s, in.table_offload);
    auto [begin, end] = stage_layers(in.cfg.n_layer, l.pp, s);
    GridCoords coords;
    coords.pp = s;
    // Micro-batches per step and dp rank: the step's rows of host-kept tables are their union.
    const int64_t rows = static_cast<int64_t>(l.micro_batch) * in.cfg.seq_len * l.dp;
    const int m = rows > 0 ? static_cast<int>(std::max<int64_t>(1, in.global_batch / rows)) : 1;
    out.push_back(estimate_memory(in.cfg, store, shape, coords, end - begin, l.micro_batch,
                                  in.act_dtype, l.recompute, l.vpp, m, in.grad_sync_bf16,
                                  in.fp8, in.zero));
  }
  return out;
}

// The cost of a layout given its largest stage's memory estimate.
static LayoutPlan cost(const PlanInput& in, const Layout& l, const MemoryEstimate& mem, int stage,
                       double max_grads, double layer_share, double matrix_global,
                       double adam_local, double head_local, double first_local) {
  LayoutPlan p;
  p.layout = l;
  p.mem = mem;
  p.stage = stage;
  p.workspace = in.workspace_gib * kGiB;
  p.fits = p.per_gpu() <= (1.0 - in.headroom) * in.gpu.memory_gib * kGiB;
  const int64_t rows_per_dp = in.global_batch / in.cfg.seq_len / l.dp;
  p.micro_batches = static_cast<int>(rows_per_dp / l.micro_batch);
  p.bubble = 1.0 + static_cast<double>(l.pp - 1) / (static_cast<double>(l.vpp) * p.micro_batches);
  const double gpus = static_cast<double>(l.tp) * l.pp * l.dp;
  const double fpt = flops_per_token(in.cfg);
  const double tokens_per_micro = static_cast<double>(l.micro_batch) * in.cfg.seq_len;
  p.gemm_eff = in.gemm_curve.at(tokens_per_micro);
  // The rerun's compute as a factor of the step's, and its extra kernel launches per layer pass.
  double rerun = 1.0, rerun_kernels = 0.0;
  switch (l.recompute) {
    case Recompute::kOff: break;
    case Recompute::kBlock:
      rerun = in.recompute_cost;
      rerun_kernels = kKernelsPerLayerPass / 3.0;  // a forward: a third of a layer's launches
      break;
    case Recompute::kAttn:  // QK-norm (2 kernels) and the attention forward (1)
      rerun = 1.0 + (fpt - 6.0 * static_cast<double>(matmul_params(in.cfg))) / (3.0 * fpt);
      rerun_kernels = 3.0;
      break;
    case Recompute::kMlp:  // relu^2 of h: one elementwise kernel
      rerun_kernels = 1.0;
      break;
  }
  p.compute_s = static_cast<double>(in.global_batch) * fpt /
                (gpus * in.gpu.peak_tflops * 1e12 * in.mfu * p.gemm_eff) * rerun;
  if (in.fp8) {
    const double share = fp8_flops_share(in.cfg);
    const double layers_all = in.cfg.n_layer;  // a step's tokens cross every layer once
    p.fp8_quant_s = static_cast<double>(in.global_batch) / (l.dp * l.pp) * layers_all *
                    fp8_quant_elements_per_token_layer(in.cfg, l.tp) * kFp8QuantBytesPerElement *
                    rerun / (in.gpu.hbm_tbps * 1e12 * kFp8HbmShare);
    p.compute_s = p.compute_s * (1.0 - share + share / kFp8GemmSpeedup) + p.fp8_quant_s;
  }
  const int layers = stage_layers(in.cfg.n_layer, l.pp, 0).second;  // the largest stage
  p.launch_s = in.launch_us * 1e-6 * (kKernelsPerLayerPass + rerun_kernels) * layers *
               p.micro_batches;
  // Stages are tp x dp ranks apart (pp is the outermost axis): neighbours share a node only
  // while a stage's ranks do not fill it.
  const bool stages_share_node = l.tp * l.dp < in.gpus_per_node;
  const double es = static_cast<double>(dtype_size(in.act_dtype));
  if (l.pp > 1)
    p.send_s = 2.0 * p.micro_batches * tokens_per_micro * in.cfg.n_embd * es /
               ((stages_share_node ? in.intra_node_gbps : in.inter_node_gbps) * 1e9);
  // A dp group is tp ranks apart (tp varies fastest): it stays in a node while tp x dp does.
  p.allreduce_gbps =
      l.tp * l.dp <= in.gpus_per_node ? in.intra_node_gbps : in.inter_node_gbps;
  // max_grads counts fp32 gradients; the bf16 wire (--grad-sync bf16) sends half of them. An
  // all-reduce sends 2 (dp-1)/dp of them a rank; ZeRO-2's reduce-scatter into the optimizer's
  // owners (--zero 2) (dp-1)/dp.
  p.allreduce_s = (in.zero == 2 ? 1.0 : 2.0) * (l.dp - 1) / l.dp * max_grads *
                  (in.grad_sync_bf16 ? 0.5 : 1.0) / (p.allreduce_gbps * 1e9);
  // Backward of the last micro-batch: 2 of the 3 passes' FLOPs, plus the rerun (3 of 4 with
  // --recompute block).
  const double extra = 3.0 * (rerun - 1.0);
  const double window_s = p.compute_s / p.micro_batches * (2.0 + extra) / (3.0 + extra);
  p.allreduce_exposed_s =
      exposed_grad_sum_s(p.allreduce_s, layer_share, layers, window_s, in.overlap_grad_sync);
  if (l.tp > 1) {
    const double tokens = static_cast<double>(rows_per_dp) * in.cfg.seq_len;
    // Two all-reduces per layer each way; a rerun block forward repeats its two.
    p.tp_comm_s = layers * (l.recompute == Recompute::kBlock ? 6.0 : 4.0) * 2.0 * (l.tp - 1) / l.tp * tokens *
                  in.cfg.n_embd * es / (in.intra_node_gbps * 1e9);
  }
  // The optimizer's collectives, once per step over the stage's tp x dp ranks
  // (optim/distributed_optimizer.h): Muon's owners broadcast each orthogonalized matrix (bf16,
  // as bf16 Newton-Schulz on GPUs gives it; global shape) to the stage; the AdamW chunks are
  // all-gathered over dp (fp32; with --zero 2 the output head's weight in bf16 where the
  // activations are bf16). ZeRO-1 runs them inside the step, exposed. ZeRO-2 leaves them in
  // flight and the next step's first forward waits layer by layer: what the embedding and the
  // shared parameters need (their fp32 gather) is exposed, the rest hides behind that forward
  // (one micro-batch's: 1 of the 3 + rerun passes of its compute) up to its length. (The
  // planner does not model the optimizer's own compute, Newton-Schulz included.)
  const int stage_ranks = l.tp * l.dp;
  if (stage_ranks > 1) {
    const double bw = p.allreduce_gbps * 1e9, share = (l.dp - 1.0) / l.dp;
    const double muon_s = 2.0 * matrix_global / bw;
    if (in.zero == 2) {
      const double head_bytes = in.act_dtype == DType::kBF16 ? 2.0 : 4.0;
      const double adam_s =
          share * (4.0 * (adam_local - head_local) + head_bytes * head_local) / bw;
      const double first_s = share * 4.0 * first_local / bw;
      const double extra_passes = 3.0 * (rerun - 1.0);
      const double forward_s = p.compute_s / p.micro_batches / (3.0 + extra_passes);
      p.param_return_s = muon_s + adam_s;
      p.optimizer_comm_s = first_s + std::max(0.0, p.param_return_s - first_s - forward_s);
    } else {
      p.param_return_s = muon_s + share * 4.0 * adam_local / bw;
      p.optimizer_comm_s = p.param_return_s;
    }
  }
  p.step_s = (p.compute_s + p.tp_comm_s + p.launch_s + p.send_s) * p.bubble +
             p.allreduce_exposed_s + p.optimizer_comm_s;
  p.tok_per_s = static_cast<double>(in.global_batch) / p.step_s;
  p.days = in.tokens / p.tok_per_s / 86400.0;
  p.gpu_hours = in.tokens / p.tok_per_s / 3600.0 * gpus;
  return p;
}

int layout_vpp(const PlanInput& in, const Layout& l) {
  const int64_t rows_per_dp = in.global_batch / in.cfg.seq_len / l.dp;
  const int64_t m = rows_per_dp / l.micro_batch;
  const bool ok = in.vpp > 1 && check_virtual_stages(in.cfg.n_layer, l.pp, in.vpp, static_cast<int>(m)).ok();
  return ok ? in.vpp : 1;
}

LayoutPlan plan_layout(const PlanInput& in, const Layout& l) {
  const std::vector<MemoryEstimate> mems = stage_memory(in, l);
  int worst = 0;
  double max_grads = 0;
  for (int s = 0; s < static_cast<int>(mems.size()); ++s) {
    if (mems[s].total() > mems[worst].total()) worst = s;
    max_grads = std::max(max_grads, mems[s].grads);
  }
  double table_numel = 0, layer_numel = 0, all_numel = 0, matrix_global = 0, adam_local = 0;
  double head_local = 0, first_local = 0;  // the output head's weight; what layer 0 waits for
  const ParamStore store = stage_store(in.cfg, l.tp, l.pp, worst, false);
  for (const ParamInfo& info : store.infos()) {
    if (info.group == ParamGroup::kMatrix)
      matrix_global += static_cast<double>(info.global_shape[0] * info.global_shape[1]);
    else
      adam_local += static_cast<double>(info.numel());
    if (info.group == ParamGroup::kLmHead)
      head_local += static_cast<double>(info.numel());
    else if (info.group != ParamGroup::kMatrix && info.layer < 0)
      first_local += static_cast<double>(info.numel());
    if (info.name.size() >= 5 && info.name.compare(info.name.size() - 5, 5, "table") == 0)
      table_numel += static_cast<double>(info.numel());
    // Summed behind backward: the layers', and the output head's (started right after the
    // head's backward: optim/grad_sync.h head_done).
    if (info.layer >= 0 || (info.group == ParamGroup::kLmHead && !info.pp_replicated))
      layer_numel += static_cast<double>(info.numel());
    all_numel += static_cast<double>(info.numel());
  }
  LayoutPlan p = cost(in, l, mems[worst], worst, max_grads,
                      all_numel > 0 ? layer_numel / all_numel : 1.0, matrix_global, adam_local,
                      head_local, first_local);
  // (With --table-offload they are in host memory: the breakdown's host line counts them.)
  if (!in.table_offload)
    p.tables = table_numel * (4 + 4 + (in.act_dtype == DType::kBF16 ? 2 : 0) + 8.0 / l.dp);
  return p;
}

absl::StatusOr<std::vector<Layout>> enumerate_layouts(const PlanInput& in) {
  const ModelConfig& c = in.cfg;
  if (in.global_batch % c.seq_len != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", in.global_batch, " tokens is not a whole number of rows of --seq-len ",
        c.seq_len, "; give a multiple of ", c.seq_len));
  if (in.gpus > in.gpus_per_node && in.gpus % in.gpus_per_node != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus ", in.gpus, " is not a whole number of nodes of --gpus-per-node ",
        in.gpus_per_node, "; give a multiple of ", in.gpus_per_node));
  const int64_t rows = in.global_batch / c.seq_len;
  VT_ASSIGN_OR_RETURN(const std::vector<Recompute> recomputes, recompute_modes(in.recompute));
  std::vector<Layout> out;
  std::vector<std::string> why;  // (tp, pp) pairs that leave no dp
  for (int tp : divisors(std::min(in.gpus_per_node, in.gpus))) {
    if (c.n_head % tp != 0 || c.n_kv_head % tp != 0) continue;
    for (int pp : divisors(c.n_layer)) {
      if (in.gpus % (tp * pp) != 0) continue;
      const int dp = in.gpus / (tp * pp);
      if (!make_grid_shape(in.gpus, tp, pp, model_split(c)).ok()) continue;  // MLP width, padded vocabulary
      if (rows % dp != 0) continue;
      const int64_t per_dp = rows / dp;
      for (int64_t b = 1; b <= per_dp; b *= 2) {
        if (per_dp % b != 0) break;  // powers of two: once one does not divide, none larger does
        if (b < in.min_micro_batch) continue;
        for (Recompute r : recomputes) {
          Layout l{tp, pp, dp, static_cast<int>(b), r};
          l.vpp = layout_vpp(in, l);
          out.push_back(l);
        }
      }
    }
  }
  if (out.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "no layout of ", in.gpus, " GPUs divides this model and batch: tp must divide --heads ",
        c.n_head, " and --kv-heads ", c.n_kv_head, " (at most --gpus-per-node ", in.gpus_per_node,
        "), pp must divide --layers ", c.n_layer, ", and dp = gpus / (tp x pp) must divide the ",
        rows, " rows of --global-batch ", in.global_batch, " in micro-batches of at least --min-micro-batch ",
        in.min_micro_batch, "; try a power-of-two --gpus"));
  return out;
}

// The least memory any layout of `in` needs per GPU (see plan.h).
absl::StatusOr<LayoutPlan> smallest_layout(const PlanInput& in) {
  VT_ASSIGN_OR_RETURN(std::vector<Layout> ls, enumerate_layouts(in));
  LayoutPlan best;
  double need = std::numeric_limits<double>::infinity();
  for (const Layout& l : ls) {
    LayoutPlan p = plan_layout(in, l);
    if (p.per_gpu() < need) {
      need = p.per_gpu();
      best = p;
    }
  }
  return best;
}

Plan model_totals(const PlanInput& in) {
  Plan p;
  {
    const ParamStore whole = stage_store(in.cfg, 1, 1, 0, false);
    double matrix = 0, other = 0;
    for (const ParamInfo& info : whole.infos())
      (info.group == ParamGroup::kMatrix ? matrix : other) +=
          static_cast<double>(shape_numel(info.global_shape));
    p.params = matrix + other;
    // /model/<name> plus /optim/<name>/momentum_buffer (Muon) or exp_avg, exp_avg_sq (AdamW).
    p.ckpt_bytes = 4.0 * (p.params + matrix + 2.0 * other);
    p.ckpt_save_s = p.ckpt_bytes / (in.disk_gbps * 1e9);
  }
  p.flops_per_token = flops_per_token(in.cfg);
  return p;
}

absl::StatusOr<Plan> make_plan(const PlanInput& in) {
  VT_ASSIGN_OR_RETURN(std::vector<Layout> ls, enumerate_layouts(in));
  Plan p = model_totals(in);
  std::map<std::tuple<int, int, int>, bool> shapes;
  for (const Layout& l : ls) {
    shapes[{l.tp, l.pp, l.dp}] = true;
    p.layouts.push_back(plan_layout(in, l));
    if (p.layouts.back().fits) p.fitting.push_back(p.layouts.back());
  }
  p.shapes = static_cast<int>(shapes.size());
  std::stable_sort(p.fitting.begin(), p.fitting.end(), by_days);
  if (!p.fitting.empty()) return p;

  // Nothing fits: the smallest need, and the GPU counts (more of them) or recompute that fit.
  const LayoutPlan* least = &p.layouts[0];
  for (const LayoutPlan& l : p.layouts)
    if (l.per_gpu() < least->per_gpu()) least = &l;
  const double cap = (1.0 - in.headroom) * in.gpu.memory_gib * kGiB;
  std::string msg = absl::StrFormat(
      "no layout of %d %s GPUs fits: the smallest need is %.1f GiB per GPU (tp %d pp %d dp %d "
      "micro-batch %d%s, with the %.1f GiB allowance) against %.1f GiB (%.0f%% of %.1f GiB)",
      in.gpus, in.gpu.name, least->per_gpu() / kGiB, least->layout.tp, least->layout.pp,
      least->layout.dp, least->layout.micro_batch, recompute_note(least->layout.recompute),
      in.workspace_gib, cap / kGiB, 100 * (1 - in.headroom), in.gpu.memory_gib);
  if (in.recompute != "all" && in.recompute != "on" && in.recompute != "block") {
    PlanInput r = in;
    for (const char* mode : {"mlp", "attn", "block"}) {
      r.recompute = mode;
      auto need = smallest_layout(r);
      if (need.ok() && need->fits) {
        absl::StrAppend(&msg, "; --recompute ", mode, " would fit");
        break;
      }
    }
  }
  std::string more;
  for (int k = 2; k <= 64 && more.empty(); k *= 2) {
    PlanInput r = in;
    r.gpus = in.gpus * k;
    if (in.recompute != "all") r.recompute = "all";
    auto need = smallest_layout(r);
    if (need.ok() && need->fits)
      more = absl::StrFormat("; --gpus %d would fit (%.1f GiB per GPU at tp %d pp %d dp %d%s)",
                             r.gpus, need->per_gpu() / kGiB, need->layout.tp, need->layout.pp,
                             need->layout.dp, recompute_note(need->layout.recompute));
  }
  if (more.empty()) more = "; no count up to 64x as many GPUs fits either: use a smaller model or a larger GPU";
  absl::StrAppend(&msg, more);
  return absl::ResourceExhaustedError(msg);
}

absl::Status check_layout(const PlanInput& in, const Layout& l) {
  const ModelConfig& c = in.cfg;
  const std::string name = absl::StrCat("tp ", l.tp, " pp ", l.pp, " dp ", l.dp);
  if (c.n_head % l.tp != 0 || c.n_kv_head % l.tp != 0)
    return absl::InvalidArgumentError(absl::StrCat(name, ": tp ", l.tp, " must divide --heads ",
                                                   c.n_head, " and --kv-heads ", c.n_kv_head));
  if (l.tp > in.gpus_per_node)
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": tp ", l.tp, " is more than --gpus-per-node ", in.gpus_per_node,
        " (tensor parallelism stays inside a node)"));
  if (c.n_layer % l.pp != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": pp ", l.pp, " must divide --layers ", c.n_layer));
  VT_RETURN_IF_ERROR(make_grid_shape(l.tp * l.pp * l.dp, l.tp, l.pp, model_split(c)).status());
  if (in.global_batch % c.seq_len != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--global-batch ", in.global_batch, " tokens is not a whole number of rows of --seq-len ",
        c.seq_len));
  const int64_t rows = in.global_batch / c.seq_len;
  if (rows % (static_cast<int64_t>(l.micro_batch) * l.dp) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " micro-batch ", l.micro_batch, ": micro-batch x dp = ",
        static_cast<int64_t>(l.micro_batch) * l.dp, " rows does not divide the ", rows,
        " rows of --global-batch ", in.global_batch));
  return absl::OkStatus();
}

std::vector<LayoutPlan> suggest_layouts(const PlanInput& in, const Layout& current, int max) {
  std::vector<LayoutPlan> fit;
  auto ls = enumerate_layouts(in);
  if (!ls.ok()) return fit;
  for (const Layout& l : *ls) {
    LayoutPlan p = plan_layout(in, l);
    if (p.fits) fit.push_back(p);
  }
  std::vector<LayoutPlan> out;
  auto same = [](const Layout& a, const Layout& b) {
    return a.tp == b.tp && a.pp == b.pp && a.dp == b.dp && a.micro_batch == b.micro_batch &&
           a.recompute == b.recompute;
  };
  auto add = [&](const LayoutPlan* p) {
    if (p == nullptr || static_cast<int>(out.size()) >= max) return;
    for (const LayoutPlan& o : out)
      if (same(o.layout, p->layout)) return;
    out.push_back(*p);
  };
  // The nearest: the same tp and pp, the largest micro-batch, without recomputation, then with
  // each mode from the least rerun work.
  for (Recompute r : {Recompute::kOff, Recompute::kMlp, Recompute::kAttn, Recompute::kBlock}) {
    const LayoutPlan* best = nullptr;
    for (const LayoutPlan& p : fit)
      if (p.layout.tp == current.tp && p.layout.pp == current.pp && p.layout.recompute == r &&
          (best == nullptr || p.layout.micro_batch > best->layout.micro_batch))
        best = &p;
    add(best);
  }
  // Then the planner's order (fewest days; ties: less recomputation, larger micro-batches).
  std::stable_sort(fit.begin(), fit.end(), by_days);
  for (const LayoutPlan& p : fit) add(&p);
  return out;
}

}  // namespace vt::plan
