// `vtrain plan`'s model of a run (docs/design.md "CLI" and "Memory"): the
// dp x tp x pp x micro-batch x recompute layouts a model can take on a cluster, each one's memory
// per GPU from the start-up estimator of `vtrain train` (plan/memory_estimate.h) plus a stated
// allowance, and what the run costs: tokens/s from an assumed MFU and the FLOPs MFU is measured
// against (model/flops.h) lowered for small GEMMs, kernel launches, pipeline sends, the 1F1B
// bubble, the data-parallel all-reduce less what backward hides (plan/step_time.h), days,
// GPU-hours, and the checkpoint's size and save time. Every number is an estimate from stated
// assumptions, never a measurement.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "model/config.h"
#include "plan/memory_estimate.h"
#include "plan/step_time.h"

namespace vt::plan {

struct GpuSpec {
  std::string name;
  double memory_gib = 0;  // what the device reports as its total memory
  double peak_tflops = 0; // dense bf16 tensor-core peak
  bool fp8 = false;       // FP8 tensor cores (Hopper: twice the bf16 peak)
  double hbm_tbps = 0;    // HBM bandwidth (datasheet), for --fp8's quantization passes
};

// h100 (SXM, 79.6 GiB, 989, FP8, 3.35 TB/s), h200 (140.4 GiB, 989, FP8, 4.8 TB/s), a100-80
// (80 GiB, 312, no FP8); "custom" takes memory_gib and tflops (both must be > 0; no FP8 known).
absl::StatusOr<GpuSpec> gpu_spec(const std::string& kind, double memory_gib, double tflops);

struct PlanInput {
  ModelConfig cfg;              // finalized
  double tokens = 0;            // the token budget
  int64_t global_batch = 524288;  // tokens per optimizer step
  int gpus = 1;
  int gpus_per_node = 8;
  GpuSpec gpu;
  double mfu = 0.4;             // assumed model-FLOPs utilization
  std::string mfu_source;       // "" (assumed, --mfu) or where a measured MFU came from
  double intra_node_gbps = 400; // GB/s per GPU for all-reduce traffic inside a node
  double inter_node_gbps = 50;  // GB/s per GPU across nodes
  double disk_gbps = 2;         // GB/s checkpoint write
  double headroom = 0.1;        // fraction of GPU memory left unused
  double workspace_gib = 2;     // CUDA context, cuBLASLt workspaces, NCCL buffers, allocator slack
  DType act_dtype = DType::kBF16;
  // Which --recompute modes to enumerate: both (off and block), on (block), off, all (off, mlp,
  // attn, block), or one mode (attn, mlp, block).
  std::string recompute = "both";
  int min_micro_batch = 1;         // smaller micro-batches are left out
  // Interleaved 1F1B (--vpp): model chunks per pipeline rank for the layouts that allow it
  // (pp > 1, vpp dividing the layers per stage, micro-batches a multiple of pp); the others
  // keep plain 1F1B. The bubble becomes (pp - 1) / (vpp m), activations in flight Megatron's.
  int vpp = 1;
  // --table-offload: the value tables (bov, bov-add, value-embed) with their gradients and
  // AdamW states in host memory; the device holds a step's rows (plan/memory_estimate.h).
  bool table_offload = false;
  // --recompute block reruns each block's forward in backward: the step's compute grows by this
  // factor (one more forward of ~2 of the 6 FLOPs per parameter and token). attn reruns the
  // attention core's forward (a third of its FLOPs, model/flops.h); mlp one elementwise pass
  // (no FLOPs counted; its kernel launch is).
  double recompute_cost = 4.0 / 3.0;
  // GEMM efficiency against tokens per GEMM (plan/step_time.h; --gemm-curve replaces it).
  GemmCurve gemm_curve = default_gemm_curve();
  double launch_us = 4;            // fixed cost of one kernel launch (--launch-us)
  bool overlap_grad_sync = true;   // as vtrain train (--no-overlap-grad-sync)
  bool grad_sync_bf16 = false;     // as vtrain train --grad-sync bf16: half the all-reduce's bytes
  // As vtrain train --zero: 1 all-reduces the gradients (2 (dp-1)/dp of them on the wire); 2
  // reduce-scatters them into the optimizer's owners ((dp-1)/dp: half the bytes) and returns the
  // updated parameters behind the next forward (LayoutPlan::optimizer_comm_s).
  int zero = 1;
  // As vtrain train --fp8 e4m3: the blocks' linear GEMMs (the Muon matrices' share of the FLOPs)
  // at kFp8GemmSpeedup times the assumed rate, plus their activations' quantization passes
  // (kFp8QuantBytesPerElement a GEMM input element, at kFp8HbmShare of the GPU's HBM bandwidth);
  // the weights' FP8 codes in the memory estimate. MFU stays counted against the bf16 peak.
  bool fp8 = false;
};

// --fp8's assumptions (bench/step_model.py's FP8 part: the same recipe, kernel by kernel):
// Hopper's dense FP8 peak is twice its bf16 peak; an activation operand is read by an amax pass
// (2 bytes) and a quantization pass (2 in, 1 out); the step model's fitted share of HBM
// bandwidth its streaming kernels reach on the 2026-11-26 window is 0.52.
inline constexpr double kFp8GemmSpeedup = 2.0;
inline constexpr double kFp8QuantBytesPerElement = 5.0;
inline constexpr double kFp8HbmShare = 0.52;
// The FP8 GEMMs' share of the model FLOPs and the elements their activation operands quantize
// per token and layer (forward inputs, data gradients' dy, both weight-gradient operands).
double fp8_flops_share(const ModelConfig& cfg);
double fp8_quant_elements_per_token_layer(const ModelConfig& cfg, int tp);
// Refuses --fp8 e4m3 on a GPU without FP8 tensor cores (a100-80) or not known to have them
// (custom), by name.
absl::Status check_fp8_gpu(const PlanInput& in);

struct Layout {
  int tp = 1, pp = 1, dp = 1, micro_batch = 1;
  Recompute recompute = Recompute::kOff;
  int vpp = 1;  // model chunks per pipeline rank (interleaved 1F1B when > 1)
};

struct LayoutPlan {
  Layout layout;
  MemoryEstimate mem;   // the pipeline stage with the largest total
  int stage = 0;        // which stage that is
  double workspace = 0; // bytes of the allowance
  double tables = 0;    // bytes of that stage's value tables (bov, bov-add, value-embed): their
                        // weights, gradients, bf16 copy and AdamW moments, inside `mem`
  double per_gpu() const { return mem.total() + workspace; }
  bool fits = false;    // per_gpu() <= (1 - headroom) x GPU memory
  int micro_batches = 1;      // per optimizer step and data-parallel rank
  double bubble = 1;          // 1 + (pp - 1) / (vpp x micro_batches)
  double gemm_eff = 1;        // the GEMM curve at micro-batch x seq-len tokens
  double compute_s = 0;       // one step at the assumed MFU x gemm_eff (with recomputation's cost;
                              // with --fp8 the FP8 GEMMs' share faster, fp8_quant_s included)
  double fp8_quant_s = 0;     // --fp8: the quantization passes of one step
  double launch_s = 0;        // kernel launches of one step (kKernelsPerLayerPass per layer and
                              // micro-batch, x 4/3 with recomputation, at launch_us each)
  double send_s = 0;          // pipeline sends of one step: the residual stream (micro-batch x
                              // seq-len x d activations) per micro-batch, forward and backward,
                              // across nodes when a stage fills them, not overlapped
  double allreduce_s = 0;     // the data-parallel gradient sum (fp32 or bf16; an all-reduce,
                              // or with zero 2 a reduce-scatter), whole
  double allreduce_exposed_s = 0;  // what of it backward does not hide (exposed_grad_sum_s)
  double allreduce_gbps = 0;  // the bandwidth it was estimated with
  // Tensor-parallel all-reduces of one step on a dp rank: 4 per layer and micro-batch (attention
  // and MLP: "reduce from" in forward, "copy to" in backward; 6 with recomputation), each
  // 2 (tp-1)/tp x micro-batch tokens x d activations, at the intra-node bandwidth, not overlapped.
  double tp_comm_s = 0;
  // The optimizer's collectives over the stage (tp x dp ranks), at the all-reduce's bandwidth:
  // the return of the updated parameters, Muon's broadcast of every orthogonalized matrix (bf16,
  // global shapes) and the all-gather of the AdamW chunks ((dp-1)/dp of the local AdamW
  // parameters, fp32; with zero 2 the output head's weight bf16 under bf16 activations), whole
  // (param_return_s), and what of it the step waits for (optimizer_comm_s): all of it with
  // zero 1; with zero 2 the gather the embedding waits for plus what the next step's first
  // forward does not hide (plan.cc cost).
  double param_return_s = 0;
  double optimizer_comm_s = 0;
  double step_s = 0;  // (compute_s + tp_comm_s + launch_s + send_s) x bubble + allreduce_exposed_s
                      // + optimizer_comm_s
  double tok_per_s = 0, days = 0, gpu_hours = 0;
};

struct Plan {
  double params = 0;           // global parameter count
  double flops_per_token = 0;  // model/flops.h
  double ckpt_bytes = 0;       // parameters + optimizer states, fp32, as the HDF5 file holds them
  double ckpt_save_s = 0;      // at disk_gbps
  int shapes = 0;              // (tp, pp, dp) combinations the model and batch allow
  std::vector<LayoutPlan> layouts;  // every enumerated layout, fitting or not
  std::vector<LayoutPlan> fitting;  // those that fit, best (fewest days) first
};

// Every pipeline stage's memory estimate under layout `l` (stage order).
std::vector<MemoryEstimate> stage_memory(const PlanInput& in, const Layout& l);

// The chunks per pipeline rank layout `l` runs with: in.vpp when the interleaved schedule
// allows it (parallel/process_grid.h check_virtual_stages), else 1.
int layout_vpp(const PlanInput& in, const Layout& l);

// The layout's memory (every stage estimated; the largest kept) and its cost. The layout must
// be one the model allows (enumerate_layouts' checks).
LayoutPlan plan_layout(const PlanInput& in, const Layout& l);

// Every layout: tp dividing heads and KV heads within a node, pp dividing layers, dp = gpus /
// (tp x pp), micro-batches of powers of two dividing each dp rank's rows, recompute per
// in.recompute. Refuses (naming the input) a batch that is not whole rows, a GPU count that is
// not whole nodes, and a cluster no layout divides.
absl::StatusOr<std::vector<Layout>> enumerate_layouts(const PlanInput& in);

// The model's totals (params, flops_per_token, checkpoint); no layouts.
Plan model_totals(const PlanInput& in);
// `vtrain plan --model-only`: the model's shape, parameters and FLOPs per token, as one line of
// text or (json) one JSON object {params, flops_per_token, layers, dim, heads, kv_heads,
// head_dim, seq_len, vocab, value, block}.
std::string model_facts(const PlanInput& in, bool json);

// All of the above; refuses when nothing fits, saying the smallest need and what would fit.
absl::StatusOr<Plan> make_plan(const PlanInput& in);

// Whether `l` is a layout of `in`'s model and batch on tp x pp x dp GPUs: tp divides the heads
// and KV heads (at most gpus_per_node), pp the layers, the grid takes the model
// (make_grid_shape), and micro-batch x dp divides the rows of the global batch (any micro-batch,
// not only the powers of two enumerate_layouts tries). The error names what to change.
absl::Status check_layout(const PlanInput& in, const Layout& l);

// Layouts of in.gpus GPUs that fit (`fits`), for a run that does not: first the nearest ones
// (`current`'s tp and pp with the largest micro-batch that fits, without recomputation if any
// does, then with it), then the planner's best by days; at most `max`, no two alike. Empty
// when no enumerated layout fits.
std::vector<LayoutPlan> suggest_layouts(const PlanInput& in, const Layout& current, int max);
// The enumerated layout that needs the least memory per GPU, fitting or not.
absl::StatusOr<LayoutPlan> smallest_layout(const PlanInput& in);

// The printed report: assumptions, the table of the best `max_layouts` (one row per tp x pp x dp x
// recompute: its fastest micro-batch, ties to the largest), the checkpoint, the best layout's
// memory breakdown.
std::string format_plan(const PlanInput& in, const Plan& p, int max_layouts);
// One layout's report (--layout): its cost and every stage's memory.
std::string format_layout(const PlanInput& in, const Plan& p, const LayoutPlan& l);
// The memory breakdown of a layout's largest stage, one item a line (weights, gradients, bf16
// copy, optimizer, activations, transients, logits, the allowance, the total): what `vtrain
// plan` prints and what `vtrain train` prints when it refuses a layout that does not fit.
std::string format_breakdown(const LayoutPlan& l);
// Every pipeline stage's start-up estimate, one line each (--layout --memory-only: what
// `vtrain train` prints as "memory estimate" on that stage's ranks).
std::string format_stage_memory(const PlanInput& in, const Layout& l);
std::string stage_memory_json(const PlanInput& in, const Layout& l);  // one object per stage
// One JSON object (one line) per layout: its shape, memory (bytes) and cost.
std::string layout_json(const LayoutPlan& l);

}  // namespace vt::plan
