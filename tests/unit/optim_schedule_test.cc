// Schedule values at the key steps: warmup, constant, warmdown to final_lr_frac, momentum ramp
// (vtrain's and nanochat's), and the Muon weight-decay coefficient (constant or cosine).
#include <gtest/gtest.h>

#include <cmath>

#include "optim/schedule.h"

namespace vt::optim {
namespace {

TEST(Schedule, DefaultsMatchModelMd) {
  ScheduleConfig c;
  EXPECT_EQ(c.warmup_steps, 40);
  EXPECT_DOUBLE_EQ(c.warmdown_frac, 0.65);
  EXPECT_DOUBLE_EQ(c.final_lr_frac, 0.05);
  EXPECT_DOUBLE_EQ(c.momentum_start, 0.85);
  EXPECT_DOUBLE_EQ(c.momentum_end, 0.95);
  EXPECT_EQ(c.momentum_steps, 300);
}

TEST(Schedule, WarmupConstantWarmdown) {
  ScheduleConfig c;
  const int64_t n = 1000;  // warmdown = 650 steps: constant through step 350
  EXPECT_EQ(warmdown_steps(c, n), 650);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 0, n), 1.0 / 40);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 19, n), 20.0 / 40);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 39, n), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 40, n), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 200, n), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 350, n), 1.0);
  const double p351 = 649.0 / 650.0;
  EXPECT_NEAR(lr_multiplier(c, 351, n), p351 + (1 - p351) * 0.05, 1e-15);
  const double p675 = 325.0 / 650.0;  // half way down: 0.5 + 0.5 * 0.05
  EXPECT_NEAR(lr_multiplier(c, 675, n), p675 + (1 - p675) * 0.05, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 675, n), 0.525, 1e-15);
  const double p999 = 1.0 / 650.0;
  EXPECT_NEAR(lr_multiplier(c, 999, n), p999 + (1 - p999) * 0.05, 1e-15);
  // Reaches the final fraction at step == total and stays there.
  EXPECT_NEAR(lr_multiplier(c, 1000, n), 0.05, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 5000, n), 0.05, 1e-15);
}

TEST(Schedule, MonotoneAfterWarmup) {
  ScheduleConfig c;
  const int64_t n = 777;
  double prev = lr_multiplier(c, c.warmup_steps, n);
  for (int64_t s = c.warmup_steps + 1; s < n; ++s) {
    const double cur = lr_multiplier(c, s, n);
    EXPECT_LE(cur, prev + 1e-15) << s;
    EXPECT_GE(cur, c.final_lr_frac);
    prev = cur;
  }
}

TEST(Schedule, RoundingOfWarmdownLength) {
  ScheduleConfig c;
  EXPECT_EQ(warmdown_steps(c, 10), 7);   // 6.5 rounds away from zero
  EXPECT_EQ(warmdown_steps(c, 5), 3);    // 3.25
  EXPECT_EQ(warmdown_steps(c, 1), 1);    // 0.65
  c.warmdown_frac = 0.0;
  EXPECT_EQ(warmdown_steps(c, 100), 0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 99, 100), 1.0);
}

TEST(Schedule, ShortRunTakesTheMinimumOfWarmupAndWarmdown) {
  ScheduleConfig c;
  c.warmup_steps = 2;
  // N = 5: D = 3, warmdown after step 2.
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 0, 5), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 1, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 2, 5), 1.0);
  EXPECT_NEAR(lr_multiplier(c, 3, 5), 2.0 / 3 + (1.0 / 3) * 0.05, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 4, 5), 1.0 / 3 + (2.0 / 3) * 0.05, 1e-15);
  // Default warmup of 40 on a 5-step run: warmup is the smaller factor at the start...
  ScheduleConfig d;
  EXPECT_DOUBLE_EQ(lr_multiplier(d, 0, 5), 1.0 / 40);
  // ...and the warmdown at the end (p = 1/3 -> 0.3667 > 5/40).
  EXPECT_DOUBLE_EQ(lr_multiplier(d, 4, 5), 5.0 / 40);
  // No warmup at all.
  ScheduleConfig e;
  e.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(lr_multiplier(e, 0, 1000), 1.0);
}

TEST(Schedule, MuonMomentum) {
  ScheduleConfig c;
  EXPECT_DOUBLE_EQ(muon_momentum(c, 0), 0.85);
  EXPECT_NEAR(muon_momentum(c, 150), 0.90, 1e-15);
  EXPECT_NEAR(muon_momentum(c, 30), 0.86, 1e-15);
  EXPECT_NEAR(muon_momentum(c, 300), 0.95, 1e-15);
  EXPECT_NEAR(muon_momentum(c, 100000), 0.95, 1e-15);
}

// nanochat's scripts/base_train.py get_muon_momentum, evaluated by hand: N = 2000 steps,
// warmdown round(0.65 * 2000) = 1300 steps starting at step 700.
TEST(Schedule, NanochatMuonMomentum) {
  ScheduleConfig c;
  c.momentum_schedule = MomentumSchedule::kNanochat;
  EXPECT_DOUBLE_EQ(muon_momentum(c, 0, 2000), 0.85);
  EXPECT_NEAR(muon_momentum(c, 200, 2000), 0.91, 1e-15);   // halfway up: (0.85 + 0.97) / 2
  EXPECT_NEAR(muon_momentum(c, 399, 2000), 0.85 + 0.12 * 399 / 400, 1e-15);
  EXPECT_DOUBLE_EQ(muon_momentum(c, 400, 2000), 0.97);
  EXPECT_DOUBLE_EQ(muon_momentum(c, 699, 2000), 0.97);
  EXPECT_DOUBLE_EQ(muon_momentum(c, 700, 2000), 0.97);     // warmdown starts: progress 0
  EXPECT_NEAR(muon_momentum(c, 1350, 2000), 0.935, 1e-15); // half the warmdown
  EXPECT_NEAR(muon_momentum(c, 2000, 2000), 0.90, 1e-15);
  // A run shorter than the ramp: the ramp wins (nanochat tests it first).
  EXPECT_NEAR(muon_momentum(c, 300, 350), 0.94, 1e-15);
  // No warmdown: 0.97 after the ramp.
  c.warmdown_frac = 0;
  EXPECT_DOUBLE_EQ(muon_momentum(c, 1999, 2000), 0.97);
}

TEST(Schedule, MuonWeightDecay) {
  EXPECT_DOUBLE_EQ(muon_weight_decay(0.28, false, 700, 1000), 0.28);
  EXPECT_DOUBLE_EQ(muon_weight_decay(0.28, true, 0, 1000), 0.28);
  EXPECT_NEAR(muon_weight_decay(0.28, true, 500, 1000), 0.14, 1e-15);
  EXPECT_NEAR(muon_weight_decay(0.28, true, 250, 1000), 0.14 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(muon_weight_decay(0.28, true, 1000, 1000), 0.0, 1e-15);
}

}  // namespace
}  // namespace vt::optim
