// Per-op wall-time profile (see op_profile.h).
#include "core/op_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

namespace vt::op_profile {

namespace {

std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, Entry>& table() {
  static std::map<std::string, Entry> t;
  return t;
}
thread_local int t_depth = 0;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void enable(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  table().clear();
}

std::vector<Entry> entries() {
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const auto& [name, e] : table()) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.op < b.op;
  });
  return out;
}

std::string report(double step_wall_seconds, int64_t steps) {
  const std::vector<Entry> es = entries();
  const double n = static_cast<double>(std::max<int64_t>(1, steps));
  const double wall = std::max(1e-12, step_wall_seconds);
  std::string s;
  char line[256];
  std::snprintf(line, sizeof(line),
                "op profile of rank 0 over %lld step(s) (the first step and evaluations left out; "
                "host time per step):\n%-24s %9s %10s %7s %9s\n",
                static_cast<long long>(steps), "op", "calls", "ms", "share", "GFLOP/s");
  s += line;
  double sum = 0;
  for (const Entry& e : es) {
    sum += e.seconds;
    char rate[32] = "";
    if (e.flops > 0) std::snprintf(rate, sizeof(rate), "%.1f", e.flops / e.seconds / 1e9);
    std::snprintf(line, sizeof(line), "%-24s %9.1f %10.2f %6.1f%% %9s\n", e.op.c_str(),
                  e.calls / n, e.seconds / n * 1e3, 100 * e.seconds / wall, rate);
    s += line;
  }
  std::snprintf(line, sizeof(line), "%-24s %9s %10.2f %6.1f%%\n%-24s %9s %10.2f %6.1f%%\n",
                "(all ops)", "", sum / n * 1e3, 100 * sum / wall, "(outside the ops)", "",
                (wall - sum) / n * 1e3, 100 * (wall - sum) / wall);
  s += line;
  return s;
}

Scope::Scope(const char* op, double flops) {
  if (t_depth++ > 0 || !enabled()) return;
  op_ = op;
  flops_ = flops;
  t0_ = now();
}

Scope::~Scope() {
  --t_depth;
  if (op_ == nullptr) return;
  const double dt = now() - t0_;
  std::lock_guard<std::mutex> lock(g_mu);
  Entry& e = table()[op_];
  if (e.op.empty()) e.op = op_;
  e.calls += 1;
  e.seconds += dt;
  e.flops += flops_;
}

Pause::Pause() : was_(enabled()) { enable(false); }
Pause::~Pause() { enable(was_); }

}  // namespace vt::op_profile
