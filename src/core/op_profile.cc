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
DeviceClock* g_clock = nullptr;  // under g_mu

// Device ops whose marks are not read yet (under g_mu).
struct Pending {
  const char* op;
  double flops;
  int a, b;
};
std::vector<Pending>& pending() {
  static std::vector<Pending> p;
  return p;
}
// Marks read back at most this many ops apart: the pool stays bounded over long runs.
constexpr size_t kMaxPending = 4096;

void add_locked(const char* op, double seconds, double flops) {
  Entry& e = table()[op];
  if (e.op.empty()) e.op = op;
  e.calls += 1;
  e.seconds += seconds;
  e.flops += flops;
}

// Reads every pending mark of the device clock into the table (g_mu held).
void resolve_locked() {
  if (g_clock == nullptr || pending().empty()) return;
  for (const Pending& p : pending()) add_locked(p.op, g_clock->seconds_between(p.a, p.b), p.flops);
  pending().clear();
  g_clock->recycle();
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void enable(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool enabled() { return g_on.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  resolve_locked();
  table().clear();
}

void set_device_clock(DeviceClock* clock) {
  std::lock_guard<std::mutex> lock(g_mu);
  resolve_locked();
  g_clock = clock;
}

std::vector<Entry> entries() {
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    resolve_locked();
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
  const char* clock = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_clock != nullptr) clock = g_clock->name();
  }
  std::snprintf(line, sizeof(line),
                "op profile of rank 0 over %lld step(s) (the first step and evaluations left out; "
                "%s%s%s per step):\n%-24s %9s %10s %7s %9s\n",
                static_cast<long long>(steps), clock ? "device ops timed by " : "host time",
                clock ? clock : "", clock ? ", host ops by the host clock; ms" : "", "op", "calls",
                "ms", "share", "GFLOP/s");
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

Scope::Scope(const char* op, double flops, bool on_device) {
  if (t_depth++ > 0 || !enabled()) return;
  op_ = op;
  flops_ = flops;
  if (on_device) {
    std::lock_guard<std::mutex> lock(g_mu);
    clock_ = g_clock;
  }
  if (clock_ != nullptr) {
    mark0_ = clock_->mark();
  } else {
    t0_ = now();
  }
}

Scope::~Scope() {
  --t_depth;
  if (op_ == nullptr) return;
  if (clock_ != nullptr) {
    const int mark1 = clock_->mark();
    std::lock_guard<std::mutex> lock(g_mu);
    if (clock_ != g_clock) return;  // the clock was replaced meanwhile: its marks are gone
    pending().push_back({op_, flops_, mark0_, mark1});
    if (pending().size() >= kMaxPending) resolve_locked();
    return;
  }
  const double dt = now() - t0_;
  std::lock_guard<std::mutex> lock(g_mu);
  add_locked(op_, dt, flops_);
}

Pause::Pause() : was_(enabled()) { enable(false); }
Pause::~Pause() { enable(was_); }

}  // namespace vt::op_profile
