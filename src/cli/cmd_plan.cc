// `vtrain plan`: the layouts a model can train on for a cluster, each one's memory per GPU (the
// start-up estimate of `vtrain train` plus a stated allowance) and what a token budget costs on
// it (days, GPU-hours, checkpoints), from an assumed MFU (src/plan/plan.h). With --layout, one
// layout's report, every pipeline stage included; with --layout --memory-only, only each stage's
// start-up memory estimate (what tools/memory_plan printed). One process, no MPI, no device.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "cli/commands.h"
#include "core/check.h"
#include "core/file_safety.h"
#include "core/flags.h"
#include "model/value_path.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "cli/model_flags.h"

namespace vt::cli {

namespace {

const CommandSpec& plan_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain plan";
    c.synopsis =
        "vtrain plan --preset d32 --tokens 200e9 --gpus 64 --gpu h100 [options]";
    c.flags = model_flag_specs();
    for (const FlagSpec& f : std::vector<FlagSpec>{
             no_default(int_flag("vocab", 32768, 2, 1 << 30,
                                 "vocabulary size (default: the preset's, 32768)")),
             flag_heading("budget"),
             no_default(num_flag("tokens", 1e9, 1, 1e18,
                                 "training tokens, e.g. 200e9 (required but with --memory-only)")),
             int_flag("global-batch", 524288, 1, 1e15,
                      "tokens per optimizer step (a multiple of --seq-len)"),
             flag_heading("cluster"),
             int_flag("gpus", 8, 1, 1 << 20, "GPUs in all"),
             choice_flag("gpu", "h100", {"h100", "h200", "a100-80", "custom"},
                         "h100: 79.6 GiB, 989 TFLOP/s; h200: 140.4 GiB, 989; a100-80: 80 GiB, "
                         "312; custom: --gpu-memory-gib and --gpu-tflops"),
             no_default(num_flag("gpu-memory-gib", 0, 0, 1e6, "memory per GPU (--gpu custom)")),
             no_default(num_flag("gpu-tflops", 0, 0, 1e9,
                                 "peak bf16 TFLOP/s per GPU (--gpu custom)")),
             int_flag("gpus-per-node", 8, 1, 1024, "GPUs per node (tensor parallel stays in one)"),
             flag_heading("assumptions"),
             num_flag("mfu", 0.4, plan::kMfuRange.lo, plan::kMfuRange.hi,
                      "model-FLOPs utilization assumed for every layout"),
             no_default(text_flag("calibrate", "",
                                  "the MFU a real run measured instead of --mfu: its metrics "
                                  "JSONL (median mfu of the steps after the first quarter; a GPU "
                                  "run on the --gpu kind), or the GPU window's "
                                  "bench/results/plan_calibration.json (its --preset entry)")),
             no_default(text_flag("gemm-curve", "",
                                  "your GEMM efficiency against tokens per GEMM, a JSON file "
                                  "{\"tokens\": [...], \"efficiency\": [...]} (default: "
                                  "published H100 measurements, docs/design.md)")),
             num_flag("launch-us", 4, 0, 1e6, "microseconds of fixed cost per kernel launch"),
             bool_flag("no-overlap-grad-sync",
                       "as vtrain train's flag: the data-parallel sum after backward, not during it"),
             choice_flag("grad-sync", "fp32", {"fp32", "bf16"},
                         "as vtrain train's flag: bf16 sends half the bytes of the data-parallel "
                         "all-reduce"),
             choice_flag("fp8", "off", {"off", "e4m3"},
                         "as vtrain train's flag: the blocks' linear GEMMs in FP8 (h100, h200)"),
             int_flag("zero", 1, 1, 2,
                      "as vtrain train's flag: 2 reduce-scatters the gradients into the "
                      "optimizer's owners (half the all-reduce's bytes)"),
             num_flag("intra-node-gbps", 400, 0.001, 1e6,
                      "GB/s (gigabytes) per GPU for the gradient all-reduce inside a node"),
             num_flag("inter-node-gbps", 50, 0.001, 1e6,
                      "GB/s (gigabytes) per GPU for the gradient all-reduce across nodes"),
             num_flag("disk-gbps", 2, 0.001, 1e6, "GB/s (gigabytes) of checkpoint writes"),
             num_flag("headroom", 0.1, 0, 0.9, "fraction of GPU memory left unused"),
             num_flag("workspace-gib", 2, 0, 1e6,
                      "allowance per GPU for CUDA context, workspaces, NCCL buffers, slack"),
             choice_flag("act-dtype", "bf16", {"bf16", "f32"}, "activations"),
             choice_flag("recompute", "both", {"both", "on", "off", "all", "attn", "mlp", "block"},
                         "which --recompute modes to weigh: both (off and block), on (block), "
                         "off, all (off, mlp, attn, block) or one mode (with --layout: both and "
                         "all = off, on = block)"),
             int_flag("min-micro-batch", 1, 1, 1 << 24,
                      "leave out smaller micro-batches"),
             flag_heading("output"),
             int_flag("max-layouts", 10, 1, 1e6, "rows of the table"),
             no_default(text_flag("layout", "",
                                  "TP,PP,DP: report only this layout (with --micro-batch), "
                                  "every pipeline stage's memory, fitting or not")),
             int_flag("micro-batch", 1, 1, 1 << 24, "rows per micro-batch (--layout)"),
             bool_flag("memory-only",
                       "with --layout: only every pipeline stage's start-up memory estimate, the "
                       "line `vtrain train` prints on that stage's ranks (no --tokens needed; "
                       "--global-batch defaults to micro-batch x dp x pp rows)"),
             int_flag("vpp", 1, 1, 1 << 20,
                      "interleaved 1F1B: model chunks per pipeline rank, for the layouts whose "
                      "layers per stage it divides and whose micro-batches are a multiple of pp "
                      "(bubble (pp-1)/(vpp m)); others keep plain 1F1B"),
             bool_flag("table-offload",
                       "value tables (bov, bov-add, value-embed) with their gradients and AdamW "
                       "states in host memory, as `train --table-offload`"),
             bool_flag("json", "one JSON object per line instead of the report"),
             bool_flag("model-only",
                       "only the model's facts: parameters, FLOPs per token and its shape (no "
                       "--tokens needed; with --json one object, as launch/ablate.py --match "
                       "reads it)"),
         })
      c.flags.push_back(f);
    c.epilog =
        "Every figure is an estimate from the assumptions above (MFU, bandwidths), not a\n"
        "measurement. Memory is the start-up estimate `vtrain train` prints, per GPU.\n\n" +
        model_choices_help();
    return c;
  }();
  return spec;
}

absl::StatusOr<plan::Layout> parse_layout(const std::string& text, int micro_batch) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  plan::Layout l;
  int* fields[3] = {&l.tp, &l.pp, &l.dp};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    try {
      size_t used = 0;
      *fields[i] = std::stoi(parts[i], &used);
      ok = used == parts[i].size() && *fields[i] >= 1;
    } catch (...) {
      ok = false;
    }
  }
  if (!ok)
    return absl::InvalidArgumentError(absl::StrCat(
        "--layout '", text, "' is not TP,PP,DP (three positive integers, e.g. 2,4,8)"));
  l.micro_batch = micro_batch;
  return l;
}

// --calibrate FILE: the measured MFU and where it came from. A JSON object is the GPU window's
// calibration (scripts/window_results.py: {"presets": {NAME: {"mfu", ...}}, "device", "date"}),
// read by --preset; anything else is a metrics JSONL of `vtrain train`.
absl::StatusOr<std::pair<double, std::string>> calibrated_mfu(const std::string& path,
                                                              const std::string& preset) {
  VT_ASSIGN_OR_RETURN(const std::string text,
                      read_regular_file(path, plan::kMaxCalibrationBytes, "--calibrate"));
  if (text.find("EMULATED") != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(
        "--calibrate ", path, " holds numbers of the CUDA emulation (labelled EMULATED), not of "
        "a GPU"));
  double mfu = 0;
  std::string source;
  const nlohmann::json whole = nlohmann::json::parse(text, nullptr, false);
  if (whole.is_object() && whole.contains("presets")) {
    const nlohmann::json& ps = whole["presets"];
    if (!ps.is_object() || !ps.contains(preset) || !ps[preset].is_object() ||
        !ps[preset].contains("mfu") || !ps[preset]["mfu"].is_number())
      return absl::InvalidArgumentError(absl::StrCat(
          "--calibrate ", path, ": no \"mfu\" for preset ", preset, " under \"presets\" (the "
          "GPU window measured ", ps.is_object() ? ps.dump() : "nothing", ")"));
    mfu = ps[preset]["mfu"].get<double>();
    source = absl::StrCat("measured on ", whole.value("device", std::string("a GPU")), " (",
                          path, ", preset ", preset, ")");
  } else {
    std::vector<double> v;
    int64_t line_no = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      ++line_no;
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object())
        return absl::InvalidArgumentError(absl::StrCat(
            "--calibrate ", path, ":", line_no, ": not a JSON object (expected a metrics JSONL "
            "of `vtrain train` or a plan_calibration.json)"));
      if (j.contains("mfu") && j["mfu"].is_number()) v.push_back(j["mfu"].get<double>());
    }
    if (v.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "--calibrate ", path, ": no step with an \"mfu\" (a metrics JSONL of `vtrain train`)"));
    std::vector<double> timed(v.begin() + static_cast<ptrdiff_t>(v.size() / 4), v.end());
    std::sort(timed.begin(), timed.end());
    mfu = timed[timed.size() / 2];
    source = absl::StrCat("measured (", path, ": median of ", timed.size(), " steps)");
  }
  VT_RETURN_IF_ERROR(plan::check_range(plan::kMfuRange, mfu, absl::StrCat("--calibrate ", path)));
  return std::make_pair(mfu, source);
}

absl::StatusOr<plan::PlanInput> plan_input(const Flags& f) {
  plan::PlanInput in;
  VT_ASSIGN_OR_RETURN(ModelConfig m, model_config_from_flags(f));
  if (f.has("vocab")) m.vocab_size = static_cast<int>(f.get_int("vocab"));
  VT_RETURN_IF_ERROR(m.finalize());
  in.cfg = m;
  if (!f.has("tokens") && !f.get_bool("memory-only") && !f.get_bool("model-only"))
    return absl::InvalidArgumentError(
        "--tokens is required (the token budget, e.g. 200e9), but with --layout --memory-only "
        "or --model-only");
  in.tokens = f.has("tokens") ? f.get_double("tokens") : 1;
  in.global_batch = f.get_int("global-batch");
  in.gpus = static_cast<int>(f.get_int("gpus"));
  in.gpus_per_node = static_cast<int>(f.get_int("gpus-per-node"));
  const std::string kind = f.get_string("gpu");
  if (kind != "custom" && (f.has("gpu-memory-gib") || f.has("gpu-tflops")))
    return absl::InvalidArgumentError(
        "--gpu-memory-gib and --gpu-tflops apply only to --gpu custom");
  const double mem = f.has("gpu-memory-gib") ? f.get_double("gpu-memory-gib") : 0;
  const double tflops = f.has("gpu-tflops") ? f.get_double("gpu-tflops") : 0;
  VT_ASSIGN_OR_RETURN(in.gpu, plan::gpu_spec(kind, mem, tflops));
  in.mfu = f.get_double("mfu");
  if (f.has("calibrate")) {
    if (f.has("mfu"))
      return absl::InvalidArgumentError(
          "--calibrate and --mfu both set the MFU: give one of them");
    VT_ASSIGN_OR_RETURN(auto cal, calibrated_mfu(f.get_string("calibrate"), f.get_string("preset")));
    in.mfu = cal.first;
    in.mfu_source = cal.second;
  }
  if (f.has("gemm-curve")) {
    VT_ASSIGN_OR_RETURN(in.gemm_curve, plan::read_gemm_curve(f.get_string("gemm-curve")));
  }
  in.launch_us = f.get_double("launch-us");
  in.overlap_grad_sync = !f.get_bool("no-overlap-grad-sync");
  in.grad_sync_bf16 = f.get_string("grad-sync") == "bf16";
  in.zero = static_cast<int>(f.get_int("zero"));
  in.fp8 = f.get_string("fp8") == "e4m3";
  VT_RETURN_IF_ERROR(plan::check_fp8_gpu(in));
  in.intra_node_gbps = f.get_double("intra-node-gbps");
  in.inter_node_gbps = f.get_double("inter-node-gbps");
  in.disk_gbps = f.get_double("disk-gbps");
  in.headroom = f.get_double("headroom");
  in.workspace_gib = f.get_double("workspace-gib");
  in.act_dtype = f.get_string("act-dtype") == "f32" ? DType::kF32 : DType::kBF16;
  in.recompute = f.get_string("recompute");
  in.min_micro_batch = static_cast<int>(f.get_int("min-micro-batch"));
  in.vpp = static_cast<int>(f.get_int("vpp"));
  in.table_offload = f.get_bool("table-offload");
  if (in.table_offload && !in.cfg.value().has_table())
    return absl::InvalidArgumentError(absl::StrCat(
        "--table-offload keeps value tables in host memory, and --value-mode ",
        in.cfg.value().name(), " has none (bov, bov-add and value-embed do)"));
  return in;
}

// --layout: the one layout, checked as enumerate_layouts checks it.
absl::StatusOr<std::string> one_layout(plan::PlanInput in, const Flags& f) {
  VT_ASSIGN_OR_RETURN(plan::Layout l, parse_layout(f.get_string("layout"),
                                                   static_cast<int>(f.get_int("micro-batch"))));
  if (in.recompute == "both" || in.recompute == "all") in.recompute = "off";
  if (in.recompute == "on") in.recompute = "block";
  VT_ASSIGN_OR_RETURN(l.recompute, parse_recompute(in.recompute));
  const int world = l.tp * l.pp * l.dp;
  if (f.has("gpus") && in.gpus != world)
    return absl::InvalidArgumentError(absl::StrCat("--layout ", f.get_string("layout"), " is ",
                                                   world, " GPUs but --gpus is ", in.gpus,
                                                   "; give one of them"));
  in.gpus = world;
  if (f.get_bool("memory-only") && !f.has("global-batch"))
    in.global_batch = static_cast<int64_t>(l.micro_batch) * l.dp * l.pp * in.cfg.seq_len;
  if (absl::Status st = plan::check_layout(in, l); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat("--layout ", f.get_string("layout"),
                                                   " --micro-batch ", l.micro_batch,
                                                   " is not a layout of this model and batch: ",
                                                   st.message()));
  l.vpp = plan::layout_vpp(in, l);
  if (f.get_bool("memory-only"))
    return f.get_bool("json") ? plan::stage_memory_json(in, l) : plan::format_stage_memory(in, l);
  const plan::Plan p = plan::model_totals(in);
  const plan::LayoutPlan lp = plan::plan_layout(in, l);
  return f.get_bool("json") ? plan::layout_json(lp) + "\n" : plan::format_layout(in, p, lp);
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(plan_command()).c_str());
    return 0;
  }
  absl::StatusOr<Flags> f = Flags::parse(plan_command(), argc, argv, 2);
  if (!f.ok()) return report_error("plan", std::string(f.status().message()).c_str());
  absl::StatusOr<plan::PlanInput> in = plan_input(*f);
  if (!in.ok()) return report_error("plan", std::string(in.status().message()).c_str());
  if (f->get_bool("model-only")) {
    if (f->has("layout"))
      return report_error("plan", "--model-only takes no --layout (it plans no layout)");
    std::printf("%s", plan::model_facts(*in, f->get_bool("json")).c_str());
    return 0;
  }
  if (f->has("micro-batch") && !f->has("layout"))
    return report_error("plan", "--micro-batch applies only with --layout TP,PP,DP");
  if (f->get_bool("memory-only") && !f->has("layout"))
    return report_error("plan", "--memory-only applies only with --layout TP,PP,DP");
  if (f->has("layout")) {
    absl::StatusOr<std::string> s = one_layout(*in, *f);
    if (!s.ok()) return report_error("plan", std::string(s.status().message()).c_str());
    std::printf("%s", s->c_str());
    return 0;
  }
  absl::StatusOr<plan::Plan> p = plan::make_plan(*in);
  if (!p.ok()) return report_error("plan", std::string(p.status().message()).c_str());
  if (f->get_bool("json")) {
    for (const plan::LayoutPlan& l : p->fitting) std::printf("%s\n", plan::layout_json(l).c_str());
  } else {
    std::printf("%s", plan::format_plan(*in, *p, static_cast<int>(f->get_int("max-layouts"))).c_str());
  }
  return 0;
}

}  // namespace vt::cli
