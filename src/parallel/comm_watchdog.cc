// Communication watchdog: per-thread "inside OP on group G since t" slots written by
// CommOpScope, and the thread that aborts the job when one call runs past the timeout.
#include "parallel/comm_watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

namespace vt {

namespace {

// One slot per thread that ever communicates; threads past the last share it (the report then
// names one of them, which is still a stuck call).
constexpr int kSlots = 16;

struct Slot {
  std::atomic<long long> since{0};  // steady-clock ns when the current call began; 0 = idle
  std::atomic<const char*> op{nullptr};
  std::atomic<const char*> group{nullptr};
  std::atomic<int> peer{-1};
};

Slot g_slots[kSlots];
std::atomic<int> g_next_slot{0};

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int my_slot() {
  thread_local int slot = std::min(g_next_slot.fetch_add(1), kSlots - 1);
  return slot;
}

long long timeout_from_env() {
  const char* env = std::getenv("VTRAIN_COMM_TIMEOUT");
  double s = kDefaultCommTimeoutSeconds;
  if (env && *env) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end && *end == '\0') {
      s = v;
    } else {
      std::fprintf(stderr, "vtrain: ignoring VTRAIN_COMM_TIMEOUT='%s' (not a number of seconds)\n",
                   env);
    }
  }
  return s > 0 ? static_cast<long long>(s * 1e9) : 0;
}

std::atomic<long long>& timeout_ns() {
  static std::atomic<long long> t{timeout_from_env()};
  return t;
}

int world_rank() {
  int init = 0, r = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

[[noreturn]] void fire(double seconds, const char* op, const char* group, int peer) {
  std::fflush(stdout);
  std::fprintf(stderr, "vtrain: rank %d: %s\n", world_rank(),
               stuck_message(seconds, op, group, peer).c_str());
  std::fflush(stderr);
  // MPI_Abort from this thread normally ends the job at once; should it block (the process
  // initialized MPI without thread support), SIGALRM's default action still ends this rank,
  // and mpirun tears the rest down when it sees a rank die.
  alarm(15);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 2);
  _exit(2);
}

class Watchdog {
 public:
  Watchdog() : thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      const long long limit = timeout_ns().load(std::memory_order_relaxed);
      const double period = limit > 0 ? std::clamp(limit * 1e-9 / 4, 0.05, 1.0) : 1.0;
      cv_.wait_for(lock, std::chrono::duration<double>(period));
      if (stop_ || limit <= 0) continue;
      const long long now = now_ns();
      const int used = std::min(g_next_slot.load(), kSlots);
      for (int i = 0; i < used; ++i) {
        Slot& s = g_slots[i];
        const long long since = s.since.load(std::memory_order_acquire);
        if (since == 0 || now - since <= limit) continue;
        const char* op = s.op.load(std::memory_order_relaxed);
        const char* group = s.group.load(std::memory_order_relaxed);
        const int peer = s.peer.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.since.load(std::memory_order_relaxed) != since) continue;  // the call just ended
        fire((now - since) * 1e-9, op, group, peer);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

const char* intern_group_name(const std::string& name) {
  static std::mutex mu;
  static std::set<std::string>* names = new std::set<std::string>;  // never freed: stable
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(name).first->c_str();
}

CommOpScope::CommOpScope(const char* op, const char* group, int peer) : slot_(my_slot()) {
  Slot& s = g_slots[slot_];
  saved_since_ = s.since.load(std::memory_order_relaxed);
  saved_op_ = s.op.load(std::memory_order_relaxed);
  saved_group_ = s.group.load(std::memory_order_relaxed);
  saved_peer_ = s.peer.load(std::memory_order_relaxed);
  s.since.store(0, std::memory_order_relaxed);
  s.op.store(op, std::memory_order_relaxed);
  s.group.store(group, std::memory_order_relaxed);
  s.peer.store(peer, std::memory_order_relaxed);
  s.since.store(now_ns(), std::memory_order_release);
}

std::atomic<long long> g_comm_ns{0};

double comm_seconds_total() { return g_comm_ns.load(std::memory_order_relaxed) * 1e-9; }

CommOpScope::~CommOpScope() {
  Slot& s = g_slots[slot_];
  const long long began = s.since.load(std::memory_order_relaxed);
  s.since.store(0, std::memory_order_relaxed);
  if (saved_since_ == 0) {  // outermost scope: count its time as communication
    if (began > 0) g_comm_ns.fetch_add(now_ns() - began, std::memory_order_relaxed);
    return;
  }
  s.op.store(saved_op_, std::memory_order_relaxed);
  s.group.store(saved_group_, std::memory_order_relaxed);
  s.peer.store(saved_peer_, std::memory_order_relaxed);
  s.since.store(saved_since_, std::memory_order_release);
}

void set_comm_timeout(double seconds) {
  timeout_ns().store(seconds > 0 ? static_cast<long long>(seconds * 1e9) : 0);
}

double comm_timeout() { return timeout_ns().load() * 1e-9; }

void start_comm_watchdog() {
  timeout_ns();  // read the environment before the thread starts
  static Watchdog watchdog;
}

std::string stuck_message(double seconds, const char* op, const char* group, int peer) {
  char buf[512];
  char peer_text[48] = "";
  if (peer >= 0) std::snprintf(peer_text, sizeof(peer_text), " with peer %d", peer);
  std::snprintf(buf, sizeof(buf),
                "stuck for %.0f s in %s%s on the %s group (a peer rank probably died or "
                "diverged); aborting",
                seconds, op ? op : "?", peer_text, group ? group : "?");
  return buf;
}

}  // namespace vt
