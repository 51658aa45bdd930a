// Learning-rate and Muon-momentum schedules (docs/model.md "Optimizer groups"), as pure functions
// of the 0-based step index and the total number of steps, so a resumed run recomputes them
// exactly.
#pragma once
#include <cstdint>

namespace vt::optim {

// Muon momentum schedules: vtrain's warmup (0.85 -> 0.95 over 300 steps, then constant), or
// nanochat's base_train (0.85 -> 0.97 over 400 steps, 0.97, then down to 0.90 across the lr
// warmdown).
enum class MomentumSchedule { kWarmup, kNanochat };

struct ScheduleConfig {
  int64_t warmup_steps = 40;       // linear warmup length (0: none)
  double warmdown_frac = 0.65;     // fraction of all steps spent in the final linear warmdown
  double final_lr_frac = 0.05;     // multiplier reached at the end of the warmdown
  double momentum_start = 0.85;    // Muon momentum at step 0
  double momentum_end = 0.95;      // Muon momentum from momentum_steps on
  int64_t momentum_steps = 300;    // length of the momentum warmup
  MomentumSchedule momentum_schedule = MomentumSchedule::kWarmup;
};

// Number of warmdown steps: round(warmdown_frac * total_steps), halves rounded away from zero.
int64_t warmdown_steps(const ScheduleConfig& c, int64_t total_steps);

// Multiplier applied to every group's peak lr at 0-based step `step` of `total_steps`
// (nanochat's shape; W = warmup_steps, D = warmdown_steps, N = total_steps):
//   warmup(s)   = (s + 1) / W            if s < W, else 1
//   warmdown(s) = 1                      if s <= N - D
//               = p + (1 - p) * final    with p = max((N - s) / D, 0), otherwise
//   lr_multiplier(s) = min(warmup(s), warmdown(s))
// When warmup and warmdown do not overlap this is exactly warmup, then 1, then warmdown; the min
// only matters for runs so short that they overlap.
double lr_multiplier(const ScheduleConfig& c, int64_t step, int64_t total_steps);

// Muon momentum: frac = min(step / momentum_steps, 1),
//   m = (1 - frac) * momentum_start + frac * momentum_end.
// (kWarmup; total_steps is not read.) kNanochat (scripts/base_train.py's get_muon_momentum,
// with D = warmdown_steps and start = N - D):
//   s < 400:       m = 0.85 + 0.12 * s / 400
//   s >= start:    m = 0.97 + (0.90 - 0.97) * (s - start) / D      (only when D > 0)
//   otherwise:     m = 0.97
double muon_momentum(const ScheduleConfig& c, int64_t step, int64_t total_steps = 0);

// Muon's weight-decay coefficient at `step` of `total_steps` for a peak `wd`: constant, or
// nanochat's cosine to zero, wd * 0.5 * (1 + cos(pi * step / total_steps)).
double muon_weight_decay(double wd, bool cosine, int64_t step, int64_t total_steps);

}  // namespace vt::optim
