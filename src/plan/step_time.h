// The parts of `vtrain plan`'s step time beyond "FLOPs at the assumed MFU" (docs/design.md,
// "`vtrain plan`"): GEMM efficiency that falls with the tokens a GEMM sees, a fixed cost per
// kernel launch, the pipeline's sends, and the data-parallel gradient sum as the trainer runs it
// (fp32, bucketed by layer and overlapped with the last micro-batch's backward). Every number is
// a stated assumption, replaceable by the user's own: these are estimates, never measurements.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::plan {

// The one range of each assumed number of the planner, however it arrives (a flag, a
// --calibrate file, a --gemm-curve file): below an MFU or GEMM efficiency of 0.001 a plan's days
// and GPU-hours stop meaning anything (1e-300 printed 300-digit day counts).
struct ValueRange {
  const char* what;
  double lo, hi;
};
inline constexpr ValueRange kMfuRange{"MFU", 0.001, 1};
inline constexpr ValueRange kGemmEfficiencyRange{"GEMM efficiency", 0.001, 1};
inline constexpr ValueRange kGemmTokensRange{"tokens per GEMM", 1, 1e9};
// Files the planner reads whole are at most this large (a metrics JSONL of a long run fits).
inline constexpr int64_t kMaxCalibrationBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxGemmCurveBytes = int64_t{1} << 20;

// OK when `v` lies in `r`; else "WHERE: MFU 1e-300 is outside [0.001, 1]" (NaN included).
absl::Status check_range(const ValueRange& r, double v, const std::string& where);

// The fraction of the large-GEMM rate a GEMM reaches against the rows (tokens) it multiplies,
// linear between points, flat beyond the last and proportional to the tokens below the first,
// never below kGemmEfficiencyRange.lo.
// The assumed (or calibrated) MFU is taken to hold at the plateau, so the curve only lowers the
// layouts whose micro-batches give GEMMs fewer tokens.
struct GemmCurve {
  std::vector<double> tokens, efficiency;  // increasing tokens; efficiency in (0, 1]
  std::string source;
  double at(double tokens) const;
};

// Published H100 measurements: bf16 GEMM throughput against M for N = 12288, K = 2048 (a d2048
// model's fused QKV shape) in vLLM pull request 53446 (H100, CUDA events, 2026-09), normalized
// to M = 2048: 256 -> 0.69, 512 -> 0.72, 1024 -> 0.98, 2048 -> 1.
GemmCurve default_gemm_curve();

// A curve from a JSON file: {"tokens": [...], "efficiency": [...]} (same length >= 1, tokens
// increasing within kGemmTokensRange, efficiency within kGemmEfficiencyRange; a regular file of
// at most kMaxGemmCurveBytes); refused by name otherwise.
absl::StatusOr<GemmCurve> read_gemm_curve(const std::string& path);

// Kernel launches per layer for one micro-batch's forward and backward, counted from
// `vtrain train --profile` (tiny preset, baseline, 2026-11-26: 42 device ops per layer and
// micro-batch, the optimizer's left out); recomputation adds a forward's share (x 4/3).
inline constexpr double kKernelsPerLayerPass = 42;

// The data-parallel gradient sum's time left exposed after backward: the layers' buckets start
// when the last micro-batch's backward finishes each layer (optim/grad_sync.h), so they overlap
// that backward (`window_s`) except the last layer's bucket, and the output head's starts right
// after the head's backward; the rest (embedding, shared parameters) is summed after backward.
// `layer_share`: the part of the stage's gradient bytes summed behind backward (the layers' and
// the head's); `layers`: the stage's layers.
double exposed_grad_sum_s(double allreduce_s, double layer_share, int layers, double window_s,
                          bool overlap);

}  // namespace vt::plan
