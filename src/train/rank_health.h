// Per-rank health of a training run (docs/design.md "Training loop"): every rank times each step
// into compute, communication wait (parallel/comm_watchdog.h's seconds inside communication
// calls) and data (reading the batch); every `every` steps the ranks gather their averages over
// those steps (one small all-gather) and rank 0 logs them. In a synchronous step every rank's
// wall time is the same, the slow rank's shows as compute and everyone else's as waiting, so a
// rank whose compute is above the median by more than `margin` (a fraction) and `min_s` seconds
// is a straggler, named with its host in the log and the metrics. A host running more ranks
// than it has CPUs (oversubscribed: the demo's 4 ranks on 2 cores) makes compute times include
// waiting for a CPU: its straggler lines say so, as the slowness is the machine's, not the rank's.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/communicator.h"
#include "nlohmann/json.hpp"

namespace vt {

struct RankTimes {
  double compute_s = 0, comm_s = 0, data_s = 0;  // per step, averaged over the window
};

struct HealthReport {
  int64_t step = 0;             // the last step of the window
  int64_t steps = 0;            // steps in the window
  std::vector<RankTimes> ranks;
  std::vector<std::string> hosts;
  // Hosts running more ranks than they have CPUs online: "vm: 4 ranks on 2 CPUs".
  std::vector<std::string> oversubscribed;
  double median_compute_s = 0;
  std::vector<int> stragglers;  // ranks, slowest first
};

// The ranks whose compute is above the median by more than `margin` x median and `min_s`
// seconds, slowest first.
std::vector<int> find_stragglers(const std::vector<double>& compute_s, double margin, double min_s);

// A straggler on purpose (tests only; docs/design.md "Test hooks"): VTRAIN_INJECT_SLOW_RANK=R:S
// makes world rank R sleep S seconds in every training step, before its forward passes.
struct SlowRank {
  int rank = -1;
  double seconds = 0;
  // From the environment (rank -1 when unset); errors name the malformed part.
  static absl::StatusOr<SlowRank> from_env();
};

class RankHealth {
 public:
  // Collective over `world` (gathers the host names and their CPUs online). every <= 0: never
  // reports.
  RankHealth(Communicator* world, int every, double margin, double min_s);
  // This rank's times of one step: its wall seconds, the seconds inside communication calls and
  // the seconds spent reading the batch.
  void add_step(double step_s, double comm_s, double data_s);
  // After step `step` (1-based): collective every `every` steps (every rank calls it after every
  // step), the window's report on every rank; nullopt between reports.
  std::optional<HealthReport> maybe_report(int64_t step);

 private:
  Communicator* world_;
  int every_;
  double margin_, min_s_;
  std::vector<std::string> hosts_;
  std::vector<std::string> oversubscribed_;
  RankTimes sum_;
  int64_t steps_ = 0;
};

// Rank 0's log line(s): each straggler with its host, compute against the median, and what the
// others waited (and, on an oversubscribed host, that its ranks share its CPUs); or one line
// saying the ranks are even.
std::string format_health(const HealthReport& r);
// The metrics line: {"step", "health": {"compute_s": [...], "comm_s": [...], "data_s": [...],
// "median_compute_s", "hosts", "oversubscribed": [...]}, "straggler": [{"rank", "host",
// "compute_s", "ratio"}...]}.
nlohmann::json health_json(const HealthReport& r);

}  // namespace vt
