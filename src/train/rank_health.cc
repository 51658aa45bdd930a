// Per-rank step times and stragglers (see rank_health.h).
#include "train/rank_health.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace vt {

namespace {

constexpr int kHostChars = 64;  // host names are gathered as this many floats (one per byte)
constexpr int kHostFloats = kHostChars + 1;  // and the host's CPUs online after them

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

absl::StatusOr<SlowRank> SlowRank::from_env() {
  SlowRank s;
  const char* env = std::getenv("VTRAIN_INJECT_SLOW_RANK");
  if (env == nullptr || *env == '\0') return s;
  const std::vector<std::string> parts = absl::StrSplit(env, ':');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &s.rank) || s.rank < 0 ||
      !absl::SimpleAtod(parts[1], &s.seconds) || !(s.seconds >= 0 && s.seconds <= 3600))
    return absl::InvalidArgumentError(absl::StrCat(
        "VTRAIN_INJECT_SLOW_RANK=", env, ": expected RANK:SECONDS (a world rank >= 0, seconds "
        "in [0, 3600])"));
  return s;
}

std::vector<int> find_stragglers(const std::vector<double>& compute_s, double margin, double min_s) {
  const double median = median_of(compute_s);
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(compute_s.size()); ++r)
    if (compute_s[r] > median * (1.0 + margin) && compute_s[r] - median > min_s) out.push_back(r);
  std::sort(out.begin(), out.end(), [&](int a, int b) { return compute_s[a] > compute_s[b]; });
  return out;
}

RankHealth::RankHealth(Communicator* world, int every, double margin, double min_s)
    : world_(world), every_(every), margin_(margin), min_s_(min_s) {
  char host[kHostChars + 1] = {0};
  gethostname(host, kHostChars);
  std::vector<float> mine(kHostFloats, 0.0f), all(static_cast<size_t>(kHostFloats) * world->size());
  for (int i = 0; i < kHostChars && host[i]; ++i) mine[i] = static_cast<unsigned char>(host[i]);
  // The CPUs online on the host (not this rank's affinity mask: a rank bound to one core would
  // make every bound job look oversubscribed).
  mine[kHostChars] = static_cast<float>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
  world->all_gather(mine.data(), all.data(), kHostFloats);
  std::map<std::string, std::pair<int, int>> per_host;  // name -> (ranks, CPUs)
  for (int r = 0; r < world->size(); ++r) {
    const float* row = all.data() + static_cast<size_t>(r) * kHostFloats;
    std::string name;
    for (int i = 0; i < kHostChars; ++i) {
      const int c = static_cast<int>(row[i]);
      if (c == 0) break;
      name.push_back(static_cast<char>(c));
    }
    hosts_.push_back(name.empty() ? "?" : name);
    auto& [ranks, cpus] = per_host[hosts_.back()];
    ++ranks;
    cpus = std::max(cpus, static_cast<int>(row[kHostChars]));
  }
  for (const auto& [name, rc] : per_host)
    if (rc.first > rc.second)
      oversubscribed_.push_back(absl::StrFormat("%s: %d ranks on %d CPUs", name, rc.first, rc.second));
}

void RankHealth::add_step(double step_s, double comm_s, double data_s) {
  sum_.comm_s += comm_s;
  sum_.data_s += data_s;
  sum_.compute_s += std::max(0.0, step_s - comm_s - data_s);
  ++steps_;
}

std::optional<HealthReport> RankHealth::maybe_report(int64_t step) {
  if (every_ <= 0 || step % every_ != 0 || steps_ == 0) return std::nullopt;
  const int n = world_->size();
  const float mine[3] = {static_cast<float>(sum_.compute_s / steps_),
                         static_cast<float>(sum_.comm_s / steps_),
                         static_cast<float>(sum_.data_s / steps_)};
  std::vector<float> all(static_cast<size_t>(3) * n);
  world_->all_gather(mine, all.data(), 3);
  HealthReport r;
  r.step = step;
  r.steps = steps_;
  r.hosts = hosts_;
  r.oversubscribed = oversubscribed_;
  std::vector<double> compute;
  for (int q = 0; q < n; ++q) {
    RankTimes t;
    t.compute_s = all[3 * q];
    t.comm_s = all[3 * q + 1];
    t.data_s = all[3 * q + 2];
    r.ranks.push_back(t);
    compute.push_back(t.compute_s);
  }
  r.median_compute_s = median_of(compute);
  r.stragglers = find_stragglers(compute, margin_, min_s_);
  sum_ = RankTimes{};
  steps_ = 0;
  return r;
}

std::string format_health(const HealthReport& r) {
  double wait = 0;
  for (const RankTimes& t : r.ranks) wait += t.comm_s;
  wait /= std::max<size_t>(1, r.ranks.size());
  if (r.stragglers.empty())
    return absl::StrFormat(
        "health step %d: %d ranks even over %d steps: compute median %.3f s/step, comm wait "
        "mean %.3f s/step\n",
        r.step, static_cast<int>(r.ranks.size()), r.steps, r.median_compute_s, wait);
  std::string s;
  for (int q : r.stragglers) {
    const RankTimes& t = r.ranks[q];
    absl::StrAppendFormat(
        &s,
        "straggler at step %d: rank %d (host %s) computes %.3f s/step, %.2fx the median %.3f s "
        "over the last %d steps; the ranks wait %.3f s/step on average in communication\n",
        r.step, q, r.hosts[q], t.compute_s,
        r.median_compute_s > 0 ? t.compute_s / r.median_compute_s : 0.0, r.median_compute_s,
        r.steps, wait);
  }
  if (!r.oversubscribed.empty())
    absl::StrAppendFormat(
        &s,
        "  (oversubscribed: %s; ranks there take turns on the CPUs, so their compute times "
        "include waiting for one and a straggler there is the machine's load, not a slow rank)\n",
        absl::StrJoin(r.oversubscribed, "; "));
  return s;
}

nlohmann::json health_json(const HealthReport& r) {
  nlohmann::json compute = nlohmann::json::array(), comm = nlohmann::json::array(),
                 data = nlohmann::json::array();
  for (const RankTimes& t : r.ranks) {
    compute.push_back(t.compute_s);
    comm.push_back(t.comm_s);
    data.push_back(t.data_s);
  }
  nlohmann::json stragglers = nlohmann::json::array();
  for (int q : r.stragglers)
    stragglers.push_back({{"rank", q},
                          {"host", r.hosts[q]},
                          {"compute_s", r.ranks[q].compute_s},
                          {"ratio", r.median_compute_s > 0 ? r.ranks[q].compute_s / r.median_compute_s : 0.0}});
  return {{"step", r.step},
          {"health",
           {{"steps", r.steps}, {"compute_s", compute}, {"comm_s", comm}, {"data_s", data},
            {"median_compute_s", r.median_compute_s}, {"hosts", r.hosts},
            {"oversubscribed", r.oversubscribed}}},
          {"straggler", stragglers}};
}

}  // namespace vt
