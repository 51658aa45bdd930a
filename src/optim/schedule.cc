// Learning-rate and momentum schedules: formulas documented in schedule.h.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace vt::optim {

int64_t warmdown_steps(const ScheduleConfig& c, int64_t total_steps) {
  VT_CHECK_MSG(c.warmdown_frac >= 0.0 && c.warmdown_frac <= 1.0,
               "warmdown_frac must be in [0, 1], got " << c.warmdown_frac);
  return static_cast<int64_t>(std::llround(c.warmdown_frac * static_cast<double>(total_steps)));
}

double lr_multiplier(const ScheduleConfig& c, int64_t step, int64_t total_steps) {
  VT_CHECK_MSG(total_steps > 0, "total_steps must be positive, got " << total_steps);
  VT_CHECK_MSG(step >= 0, "step must be >= 0, got " << step);
  double warm = 1.0;
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    warm = static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  double down = 1.0;
  const int64_t d = warmdown_steps(c, total_steps);
  if (d > 0 && step > total_steps - d) {
    // Clamped so that steps past the end stay at final_lr_frac.
    const double p =
        std::max(static_cast<double>(total_steps - step) / static_cast<double>(d), 0.0);
    down = p + (1.0 - p) * c.final_lr_frac;
  }
  return std::min(warm, down);
}

double muon_momentum(const ScheduleConfig& c, int64_t step, int64_t total_steps) {
  if (c.momentum_schedule == MomentumSchedule::kNanochat) {
    if (step < 400) return 0.85 + 0.12 * static_cast<double>(step) / 400.0;
    const int64_t d = total_steps > 0 ? warmdown_steps(c, total_steps) : 0;
    const int64_t start = total_steps - d;
    if (d > 0 && step >= start) {
      const double p = static_cast<double>(step - start) / static_cast<double>(d);
      return 0.97 * (1.0 - p) + 0.90 * p;
    }
    return 0.97;
  }
  double frac = 1.0;
  if (c.momentum_steps > 0) {
    frac = std::min(static_cast<double>(step) / static_cast<double>(c.momentum_steps), 1.0);
  }
  return (1.0 - frac) * c.momentum_start + frac * c.momentum_end;
}

double muon_weight_decay(double wd, bool cosine, int64_t step, int64_t total_steps) {
  if (!cosine) return wd;
  VT_CHECK_MSG(total_steps > 0, "total_steps must be positive, got " << total_steps);
  constexpr double kPi = 3.14159265358979323846;
  return wd * 0.5 *
         (1.0 + std::cos(kPi * static_cast<double>(step) / static_cast<double>(total_steps)));
}

}  // namespace vt::optim
