// The text `vtrain plan` prints (see plan.h): assumptions, the layout table, the checkpoint and
// a memory breakdown.
#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/block_shape_kind.h"
#include "nlohmann/json.hpp"
#include "model/value_mode.h"
#include "parallel/process_grid.h"
#include "plan/plan.h"

namespace vt::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string model_line(const PlanInput& in, const Plan& p) {
  const ModelConfig& c = in.cfg;
  return absl::StrFormat(
      "model: L%d d%d heads %d/%d kv x hd %d, T %d, vocab %d, %s, %s: %.3g B parameters, "
      "%.3g GFLOP per token (model FLOPs, as MFU counts them)\n",
      c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.seq_len, c.vocab_size,
      value_mode_name(c.value_mode), block_shape_name(c.block), p.params / 1e9,
      p.flops_per_token / 1e9);
}

std::string header(const PlanInput& in, const Plan& p) {
  const ModelConfig& c = in.cfg;
  std::string s = model_line(in, p);
  absl::StrAppendFormat(
      &s, "run: %.4g B tokens, global batch %d tokens (%d rows), %d x %s (%.1f GiB, %.0f TFLOP/s "
          "bf16), %d per node\n",
      in.tokens / 1e9, in.global_batch, static_cast<int>(in.global_batch / c.seq_len), in.gpus,
      in.gpu.name, in.gpu.memory_gib, in.gpu.peak_tflops, in.gpus_per_node);
  absl::StrAppendFormat(
      &s,
      "assumed: MFU %.2f%s at large GEMMs, lowered for micro-batches of fewer tokens by the GEMM "
      "curve (%s); recompute costs x%.2f compute; %s; %.0f kernel launches per layer and "
      "micro-batch at %.1f us each; pipeline sends of the residual stream not overlapped; "
      "data-parallel %s x %s grads at %.0f GB/s in a node, %.0f GB/s "
      "across nodes, %s; tensor-parallel all-reduces (4 per layer and micro-batch, 6 with "
      "recompute) at the in-node rate, not overlapped; the optimizer's broadcast of Muon's "
      "matrices (bf16) and all-gather of the AdamW chunks over the stage at the all-reduce's "
      "rate, %s\n",
      in.mfu, in.mfu_source.empty() ? "" : absl::StrCat(", ", in.mfu_source).c_str(),
      in.gemm_curve.source, in.recompute_cost,
      in.vpp > 1 ? absl::StrCat("1F1B bubble x(1 + (pp-1)/(", in.vpp, " m)) where --vpp ", in.vpp,
                                " divides the layers per stage and m is a multiple of pp (interleaved), "
                                "else x(1 + (pp-1)/m)").c_str()
                 : "1F1B bubble x(1 + (pp-1)/m)",
      kKernelsPerLayerPass, in.launch_us,
      in.zero == 2 ? "reduce-scatter into the optimizer's owners (--zero 2) (dp-1)/dp"
                   : "all-reduce 2(dp-1)/dp",
      in.grad_sync_bf16 ? "bf16 (--grad-sync bf16)" : "fp32", in.intra_node_gbps,
      in.inter_node_gbps,
      in.overlap_grad_sync ? "its layers' buckets overlapped with the last micro-batch's backward "
                             "(as vtrain train)"
                           : "after backward (--no-overlap-grad-sync)",
      in.zero == 2 ? "behind the next step's first forward layer by layer (--zero 2: the head's "
                     "weight in bf16; the embedding's gather exposed)"
                   : "not overlapped");
  if (in.fp8)
    absl::StrAppendFormat(
        &s,
        "--fp8 e4m3: the blocks' linear GEMMs (%.0f%% of the model FLOPs) at %.0fx the assumed "
        "rate (Hopper's FP8 peak is %.0fx bf16's), plus their activations' quantization (%.0f "
        "bytes a GEMM input element at %.0f%% of %.2f TB/s HBM); MFU stays counted against the "
        "bf16 peak (as peers report FP8 runs); the weights' FP8 codes in the memory\n",
        100 * plan::fp8_flops_share(c), kFp8GemmSpeedup, kFp8GemmSpeedup,
        kFp8QuantBytesPerElement, 100 * kFp8HbmShare, in.gpu.hbm_tbps);
  absl::StrAppendFormat(
      &s,
      "fits: the start-up memory estimate of `vtrain train` + %.1f GiB for CUDA context, "
      "workspaces and communication buffers <= %.0f%% of %.1f GiB = %.1f GiB\n",
      in.workspace_gib, 100 * (1 - in.headroom), in.gpu.memory_gib,
      (1 - in.headroom) * in.gpu.memory_gib);
  return s;
}

std::string row(const LayoutPlan& l) {
  return absl::StrFormat(
      "%4d %4d %5d %4d %5d  %-9s %8.1f %7.3f %5.2f %8.3f %8.3f %8.3f %9.3f %8.3f %11.0f %8.2f %11.0f\n",
      l.layout.tp, l.layout.pp, l.layout.dp, l.layout.micro_batch, l.micro_batches,
      recompute_name(l.layout.recompute), l.per_gpu() / kGiB, l.bubble, l.gemm_eff, l.launch_s,
      l.tp_comm_s, l.send_s, l.allreduce_exposed_s, l.step_s, l.tok_per_s, l.days, l.gpu_hours);
}

const char* kCaveat =
    "\nAn estimate, not a measurement: from an assumed MFU, a GEMM curve, a launch cost and\n"
    "bandwidths. Measure the chosen layout's MFU (`vtrain train` prints it) and give it back\n"
    "with --calibrate, and your GPU's GEMM curve with --gemm-curve, before trusting the days.\n";

const char* kColumns =
    "  tp   pp    dp   mb     m  recompute  GiB/GPU  bubble  gemm  launch s     tp s     pp s      dp s   step s       tok/s     days   GPU-hours\n";

std::string checkpoint(const Plan& p, const PlanInput& in) {
  return absl::StrFormat(
      "checkpoint: %.1f GiB (fp32 parameters + Muon momentum + AdamW moments, global shapes, as "
      "the HDF5 file holds them); %.0f s to save at %.1f GB/s\n",
      p.ckpt_bytes / kGiB, p.ckpt_save_s, in.disk_gbps);
}

}  // namespace

std::string format_breakdown(const LayoutPlan& l) {
  const MemoryEstimate& m = l.mem;
  std::string s = absl::StrFormat(
      "memory per GPU of tp %d pp %d dp %d micro-batch %d recompute %s (pipeline stage %d, the "
      "largest):\n",
      l.layout.tp, l.layout.pp, l.layout.dp, l.layout.micro_batch,
      recompute_name(l.layout.recompute), l.stage);
  auto line = [&](const char* what, double bytes) {
    absl::StrAppendFormat(&s, "  %-58s %8.2f GiB\n", what, bytes / kGiB);
  };
  line("weights (fp32)", m.params);
  line("gradients (fp32)", m.grads);
  if (m.grad_wire > 0) line("their bf16 copies on the wire (--grad-sync bf16)", m.grad_wire);
  line("bf16 weight copy", m.compute_copy);
  line("optimizer (Muon momentum; AdamW moments / dp)", m.optimizer);
  line("activations kept for backward", m.activations);
  line("rebuilt in one block's backward (--recompute)", m.recompute_transient);
  line("backward temporaries (one block)", m.backward_transient);
  if (m.zero_reduce + m.param_gather > 0)
    line("ZeRO-2 buffers: packed reduce-scatter or parameter gathers", std::max(m.zero_reduce, m.param_gather));
  line("logits and their gradient (last stage; freed before the", m.logits);
  absl::StrAppendFormat(&s, "    blocks' backward: this or the two above count, the larger)\n");
  if (m.table_rows > 0) line("value-table rows of a step and their gradient", m.table_rows);
  if (m.fp8_weights > 0) {
    line("the weights' FP8 codes, both layouts (--fp8)", m.fp8_weights);
    line("  + the largest FP8 GEMM's codes (with the transients)", m.fp8_scratch);
  }
  line("allowance: context, workspaces, comm buffers", l.workspace);
  line("total", l.per_gpu());
  if (m.host_tables > 0) line("  + value tables in host memory (--table-offload)", m.host_tables);
  if (l.tables > 0) line("  of which value tables (all their parts)", l.tables);
  return s;
}

// One line on why the first layout wins: its bubble and exposed communication, against the best
// layout without a pipeline when the winner has one.
std::string why_line(const Plan& p) {
  const LayoutPlan& w = p.fitting.front();
  auto name = [](const LayoutPlan& l) {
    return absl::StrFormat("tp %d pp %d dp %d mb %d", l.layout.tp, l.layout.pp, l.layout.dp,
                           l.layout.micro_batch);
  };
  const double busy = w.compute_s + w.tp_comm_s + w.launch_s + w.send_s;
  std::string s = absl::StrFormat(
      "why: %s wins at %.3f s a step: pipeline bubble %.3f s ((%.3f - 1) x %.3f s of compute, "
      "launches, tp all-reduces and sends), exposed gradient sum %.3f s, optimizer collectives "
      "%.3f s exposed of %.3f s",
      name(w), w.step_s, (w.bubble - 1) * busy, w.bubble, busy, w.allreduce_exposed_s,
      w.optimizer_comm_s, w.param_return_s);
  if (w.layout.pp > 1) {
    const LayoutPlan* flat = nullptr;
    for (const LayoutPlan& l : p.fitting)
      if (l.layout.pp == 1) {
        flat = &l;
        break;
      }
    if (flat != nullptr)
      absl::StrAppendFormat(
          &s,
          "; the best layout without a pipeline (%s, %.3f s) has no bubble but exposes %.3f s of "
          "its gradient sum, %.3f s of optimizer collectives (of %.3f s: Muon's broadcasts and "
          "the AdamW all-gather) and %.3f s of tp all-reduces",
          name(*flat), flat->step_s, flat->allreduce_exposed_s, flat->optimizer_comm_s,
          flat->param_return_s, flat->tp_comm_s);
  }
  return s + "\n";
}

std::string format_plan(const PlanInput& in, const Plan& p, int max_layouts) {
  std::string s = header(in, p);
  std::set<std::tuple<int, int, int, Recompute>> seen;
  std::vector<const LayoutPlan*> shown;
  for (const LayoutPlan& l : p.fitting) {
    if (!seen.insert({l.layout.tp, l.layout.pp, l.layout.dp, l.layout.recompute}).second) continue;
    if (static_cast<int>(shown.size()) < max_layouts) shown.push_back(&l);
  }
  absl::StrAppendFormat(
      &s,
      "\n%d layouts (%d tp x pp x dp shapes x micro-batches x recompute), %d fit; the best %d of "
      "%d tp x pp x dp x recompute rows (each at its fastest micro-batch mb, m micro-batches per "
      "step and dp rank), by days; gemm: the GEMM curve's factor; seconds per step in kernel "
      "launches, tensor-parallel all-reduces, pipeline sends and the data-parallel all-reduce "
      "left exposed after backward:\n\n",
      static_cast<int>(p.layouts.size()), p.shapes, static_cast<int>(p.fitting.size()),
      static_cast<int>(shown.size()), static_cast<int>(seen.size()));
  s += kColumns;
  for (const LayoutPlan* l : shown) s += row(*l);
  if (!p.fitting.empty()) absl::StrAppend(&s, "\n", why_line(p));
  // StrAppend, not `"\n" + std::string + ...`: g++ 12 at -O3 warns -Wrestrict on a string
  // literal + std::string (a false positive, GCC bug 105329).
  absl::StrAppend(&s, "\n", checkpoint(p, in), "\n", format_breakdown(p.fitting.front()), kCaveat);
  return s;
}

std::string format_layout(const PlanInput& in, const Plan& p, const LayoutPlan& l) {
  std::string s = absl::StrCat(header(in, p), "\n", kColumns, row(l));  // (see format_plan)
  absl::StrAppendFormat(&s, "%s\n", l.fits ? "fits" : "DOES NOT FIT");
  if (in.vpp > 1)
    absl::StrAppendFormat(&s, "%s\n",
                          l.layout.vpp > 1
                              ? absl::StrCat("interleaved 1F1B: --vpp ", l.layout.vpp, " chunks per pipeline rank")
                              : absl::StrCat("plain 1F1B: --vpp ", in.vpp,
                                             " needs pp > 1 dividing into equal chunks of the layers per "
                                             "stage and micro-batches a multiple of pp"));
  absl::StrAppend(&s, "\n", checkpoint(p, in), "\n", format_breakdown(l));
  const std::vector<MemoryEstimate> stages = stage_memory(in, l.layout);
  if (stages.size() > 1) {
    s += "every stage (the start-up estimate, without the allowance):\n";
    for (size_t i = 0; i < stages.size(); ++i)
      absl::StrAppendFormat(&s, "  stage %d: %s\n", static_cast<int>(i), stages[i].to_string());
  }
  s += kCaveat;
  return s;
}

std::string format_stage_memory(const PlanInput& in, const Layout& l) {
  const std::vector<MemoryEstimate> stages = stage_memory(in, l);
  std::string s;
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    const auto [begin, end] = stage_layers(in.cfg.n_layer, l.pp, i);
    absl::StrAppendFormat(&s, "tp %d pp %d dp %d micro-batch %d%s%s stage %d (layers %d..%d): %s\n",
                          l.tp, l.pp, l.dp, l.micro_batch,
                          l.recompute == Recompute::kOff
                              ? std::string()
                              : absl::StrCat(" recompute ", recompute_name(l.recompute)),
                          l.vpp > 1 ? absl::StrCat(" vpp ", l.vpp) : "", i, begin, end - 1,
                          stages[i].to_string());
  }
  return s;
}

std::string stage_memory_json(const PlanInput& in, const Layout& l) {
  const std::vector<MemoryEstimate> stages = stage_memory(in, l);
  std::string s;
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    const MemoryEstimate& m = stages[i];
    const auto [begin, end] = stage_layers(in.cfg.n_layer, l.pp, i);
    nlohmann::json j = {{"tp", l.tp}, {"pp", l.pp}, {"vpp", l.vpp}, {"dp", l.dp},
                        {"micro_batch", l.micro_batch}, {"recompute", recompute_name(l.recompute)},
                        {"stage", i}, {"layer_begin", begin}, {"layer_end", end},
                        {"params_bytes", m.params}, {"grads_bytes", m.grads}, {"grad_wire_bytes", m.grad_wire},
                        {"bf16_copy_bytes", m.compute_copy}, {"optimizer_bytes", m.optimizer},
                        {"activations_bytes", m.activations},
                        {"recompute_bytes", m.recompute_transient},
                        {"backward_bytes", m.backward_transient}, {"logits_bytes", m.logits},
                      {"fp8_weights_bytes", m.fp8_weights}, {"fp8_scratch_bytes", m.fp8_scratch},
                        {"estimate_bytes", m.total()}};
    s += j.dump() + "\n";
  }
  return s;
}

std::string layout_json(const LayoutPlan& l) {
  const MemoryEstimate& m = l.mem;
  nlohmann::json j = {{"tp", l.layout.tp}, {"pp", l.layout.pp}, {"vpp", l.layout.vpp}, {"dp", l.layout.dp},
                      {"micro_batch", l.layout.micro_batch}, {"recompute", recompute_name(l.layout.recompute)},
                      {"micro_batches", l.micro_batches}, {"stage", l.stage},
                      {"params_bytes", m.params}, {"grads_bytes", m.grads}, {"grad_wire_bytes", m.grad_wire},
                      {"bf16_copy_bytes", m.compute_copy}, {"optimizer_bytes", m.optimizer},
                      {"activations_bytes", m.activations},
                      {"recompute_bytes", m.recompute_transient},
                      {"backward_bytes", m.backward_transient}, {"logits_bytes", m.logits},
                      {"fp8_weights_bytes", m.fp8_weights}, {"fp8_scratch_bytes", m.fp8_scratch},
                      {"tables_bytes", l.tables}, {"estimate_bytes", m.total()},
                      {"allowance_bytes", l.workspace}, {"per_gpu_bytes", l.per_gpu()},
                      {"fits", l.fits}, {"bubble", l.bubble}, {"compute_s", l.compute_s},
                      {"fp8_quant_s", l.fp8_quant_s},
                      {"gemm_eff", l.gemm_eff}, {"launch_s", l.launch_s}, {"send_s", l.send_s},
                      {"allreduce_s", l.allreduce_s}, {"allreduce_exposed_s", l.allreduce_exposed_s},
                      {"optimizer_comm_s", l.optimizer_comm_s},
                      {"param_return_s", l.param_return_s},
                      {"tp_comm_s", l.tp_comm_s}, {"step_s", l.step_s},
                      {"tok_per_s", l.tok_per_s}, {"days", l.days}, {"gpu_hours", l.gpu_hours}};
  return j.dump();
}

std::string model_facts(const PlanInput& in, bool json) {
  const Plan p = model_totals(in);
  if (!json) return model_line(in, p);
  const ModelConfig& c = in.cfg;
  const nlohmann::json j = {{"params", p.params},       {"flops_per_token", p.flops_per_token},
                            {"layers", c.n_layer},      {"dim", c.n_embd},
                            {"heads", c.n_head},        {"kv_heads", c.n_kv_head},
                            {"head_dim", c.head_dim},   {"seq_len", c.seq_len},
                            {"vocab", c.vocab_size},    {"value", value_mode_name(c.value_mode)},
                            {"block", block_shape_name(c.block)}};
  return j.dump() + "\n";
}

}  // namespace vt::plan
