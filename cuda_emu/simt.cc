// The SIMT scheduler of the CUDA emulation: every block of a launch runs as one fiber per GPU
// thread on one OS thread. A fiber runs until it reaches a block barrier, a warp collective or
// its end; when no fiber can run, the scheduler releases whatever is complete (a warp collective
// whose lanes have all arrived, a barrier that every live thread has reached) and resumes the
// released fibers. When nothing can be released the block is stuck: the launch fails with a
// description of where each thread waits (on a GPU this would hang or be undefined). Barriers
// count exited threads as arrived, as the hardware does; warp collectives drop exited lanes from
// their mask.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fiber.h"
#include "simt_exec.h"
#include "vt_emu/simt.h"

namespace vt_emu {

namespace {

constexpr size_t kStackBytes = size_t(128) << 10;
constexpr size_t kSmemAlign = 128;

enum class St : uint8_t { kNotStarted, kRunnable, kBarrier, kWarp, kExited };

struct Fiber {
  SimtThread t;
  St st = St::kExited;
  int stack = -1;  // index into Executor::stacks while started and not yet exited
  FiberContext ctx;
  // At a barrier.
  const char* file = "";
  unsigned line = 0;
  int bar_kind = 0, bar_pred = 0, bar_result = 0;
  // At a warp collective (wname: the operation's name for an exchange).
  detail::WarpOp wop = detail::WarpOp::kSync;
  const char* wname = nullptr;
  unsigned wmask = 0, wsize = 0;
  int warg = 0, wwidth = 32;
  uint64_t wval[2] = {0, 0}, wres[2] = {0, 0};
};

struct Executor {
  std::vector<Fiber> fibers;
  // Stacks are taken when a fiber starts and given back when it exits, most recently used first:
  // a block whose threads run to the end one after another touches a single stack.
  std::vector<FiberStack> stacks;
  std::vector<int> free_stacks;
  FiberContext sched;
  Fiber* running = nullptr;
  const KernelRun* run = nullptr;
  SimtBlock block;
  std::unique_ptr<unsigned char, void (*)(void*)> smem{nullptr, std::free};
  size_t smem_cap = 0;
  unsigned live = 0;
  uint64_t switches = 0;
  // The pass in progress: fibers run in order and hand the CPU directly to the next runnable
  // one (one switch per suspension, not two); the scheduler regains control at a pass's end.
  unsigned n = 0, cursor = 0;
  bool reverse = false;
  int pending_free = -1;      // stack of a fiber that exited, freed by whoever runs next
  // Per warp of the block: lanes waiting at a collective, lanes exited (or beyond the block).
  std::vector<uint32_t> warp_waiting, warp_exited;
  std::string pending_fault;  // found by a fiber (a warp collective used wrongly)
};

thread_local Executor tl_exec;

std::atomic<int> g_order{-1};    // -1: not read from the environment yet
std::atomic<int> g_workers{0};   // 0: not read yet
std::atomic<uint64_t> g_kernels{0}, g_blocks{0}, g_threads{0}, g_switches{0};

const char* op_name(detail::WarpOp op) {
  switch (op) {
    case detail::WarpOp::kSync: return "__syncwarp";
    case detail::WarpOp::kShflIdx: return "__shfl_sync";
    case detail::WarpOp::kShflUp: return "__shfl_up_sync";
    case detail::WarpOp::kShflDown: return "__shfl_down_sync";
    case detail::WarpOp::kShflXor: return "__shfl_xor_sync";
    case detail::WarpOp::kBallot: return "__ballot_sync";
    case detail::WarpOp::kAny: return "__any_sync";
    case detail::WarpOp::kAll: return "__all_sync";
    case detail::WarpOp::kExchange: return "warp matrix operation";
  }
  return "?";
}

// The name of the collective a fiber waits at (an exchange names its operation).
const char* fiber_op_name(const Fiber& f) {
  return f.wop == detail::WarpOp::kExchange && f.wname ? f.wname : op_name(f.wop);
}

const char* barrier_name(int kind) {
  static const char* names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                "__syncthreads_or"};
  return kind >= 0 && kind < 4 ? names[kind] : "__syncthreads";
}

std::string site(const char* file, unsigned line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}

std::string where(const Executor& ex) {
  std::ostringstream os;
  const uint3 b = ex.block.idx;
  os << "kernel " << ex.run->name << " block (" << b.x << "," << b.y << "," << b.z << ")";
  return os.str();
}

// Thread ranges for messages: "0-31,64".
std::string ranges(const std::vector<unsigned>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) os << ",";
    os << ids[i];
    if (j > i) os << "-" << ids[j];
    i = j + 1;
  }
  return os.str();
}

void fiber_main(void* arg);

int take_stack(Executor& ex) {
  if (!ex.free_stacks.empty()) {
    const int s = ex.free_stacks.back();
    ex.free_stacks.pop_back();
    return s;
  }
  ex.stacks.emplace_back(kStackBytes);
  return int(ex.stacks.size()) - 1;
}

// The next fiber of the pass that can run (started here if new), or nullptr at the pass's end.
Fiber* next_in_pass(Executor& ex) {
  while (ex.cursor < ex.n) {
    const unsigned j = ex.cursor++;
    Fiber& f = ex.fibers[ex.reverse ? ex.n - 1 - j : j];
    if (f.st == St::kNotStarted) {
      f.stack = take_stack(ex);
      fiber_init(&f.ctx, ex.stacks[size_t(f.stack)], fiber_main, &ex);
      f.st = St::kRunnable;
      return &f;
    }
    if (f.st == St::kRunnable) return &f;
  }
  return nullptr;
}

// Switches from `from` (suspending or exiting) to the next fiber of the pass, or back to the
// scheduler when the pass is over.
void hand_off(Executor& ex, FiberContext* from) {
  Fiber* next = next_in_pass(ex);
  if (next == nullptr) {
    fiber_switch(from, &ex.sched);
    return;
  }
  ex.running = next;
  detail::tl_thread = &next->t;
  ++ex.switches;
  fiber_switch(from, &next->ctx);
}

// Run by whoever gets the CPU: frees the stack of a fiber that exited just before.
void after_switch(Executor& ex) {
  if (ex.pending_free >= 0) {
    ex.free_stacks.push_back(ex.pending_free);
    ex.pending_free = -1;
  }
}

void fiber_main(void* arg) {
  Executor* ex = static_cast<Executor*>(arg);
  after_switch(*ex);
  Fiber* f = ex->running;
  ex->run->body();
  f->st = St::kExited;
  --ex->live;
  ex->warp_exited[f->t.warp] |= 1u << f->t.lane;
  ex->pending_free = f->stack;  // still in use until the switch below
  f->stack = -1;
  hand_off(*ex, &f->ctx);
  std::abort();  // an exited fiber is never resumed
}

Fiber* running_fiber(const char* what) {
  Executor& ex = tl_exec;
  if (ex.running == nullptr) detail::outside_kernel(what);
  return ex.running;
}

void suspend(Fiber* f) {
  Executor& ex = tl_exec;
  hand_off(ex, &f->ctx);
  after_switch(ex);
}

// The source lane of a shuffle, or -1 when the lane reads its own value.
int shuffle_source(detail::WarpOp op, unsigned lane, int arg, int width) {
  const int w = width, seg = int(lane) / w * w;
  int src = int(lane);
  switch (op) {
    case detail::WarpOp::kShflIdx: src = seg + (arg & (w - 1)); break;
    case detail::WarpOp::kShflUp: src = int(lane) - arg; if (src < seg) src = int(lane); break;
    case detail::WarpOp::kShflDown: src = int(lane) + arg; if (src >= seg + w) src = int(lane); break;
    case detail::WarpOp::kShflXor: src = int(lane) ^ arg; if (src >= seg + w) src = int(lane); break;
    default: break;
  }
  return src;
}

// Releases the collectives of warp w whose lanes have all arrived (only the group of lane `only`
// when it is >= 0). Returns the number released, or -1 with *fault set when a collective is used
// wrongly.
int release_warp(Executor& ex, unsigned n, unsigned w, int only, std::string* fault) {
  int released = 0;
  {
    Fiber* lf = &ex.fibers[32 * w];
    const unsigned waiting = ex.warp_waiting[w], exited = ex.warp_exited[w];
    unsigned todo = waiting;
    if (only >= 0) {
      if (!(waiting & (1u << only))) return 0;
      todo = 0;
      for (unsigned t = waiting; t; t &= t - 1) {
        const unsigned l = unsigned(__builtin_ctz(t));
        if (lf[l].wmask == lf[only].wmask) todo |= 1u << l;
      }
    }
    while (todo) {
      const unsigned l0 = unsigned(__builtin_ctz(todo));
      const unsigned m = lf[l0].wmask;
      unsigned group = 0;
      for (unsigned t = todo; t; t &= t - 1) {
        const unsigned l = unsigned(__builtin_ctz(t));
        if (lf[l].wmask == m) group |= 1u << l;
      }
      todo &= ~group;
      if (group & ~m) {
        const unsigned l = unsigned(__builtin_ctz(group & ~m));
        *fault = where(ex) + ": thread " + std::to_string(32 * w + l) + " calls " +
                 fiber_op_name(lf[l]) + " (" + site(lf[l].file, lf[l].line) +
                 ") with a mask that does not include its own lane";
        return -1;
      }
      const unsigned need = m & ~exited;
      if (need & ~group) continue;  // some lanes of the mask are elsewhere: not complete (yet)
      for (unsigned t = group; t; t &= t - 1) {
        const unsigned l = unsigned(__builtin_ctz(t));
        if (lf[l].wop != lf[l0].wop || lf[l].wsize != lf[l0].wsize ||
            (lf[l].wop == detail::WarpOp::kExchange &&
             (lf[l].wval[1] != lf[l0].wval[1] || lf[l].line != lf[l0].line ||
              std::strcmp(lf[l].file, lf[l0].file) != 0))) {
          *fault = where(ex) + ": divergent warp collectives in warp " + std::to_string(w) +
                   ": lane " + std::to_string(l0) + " at " + fiber_op_name(lf[l0]) + " (" +
                   site(lf[l0].file, lf[l0].line) + "), lane " + std::to_string(l) + " at " +
                   fiber_op_name(lf[l]) + " (" + site(lf[l].file, lf[l].line) + ")";
          return -1;
        }
      }
      const detail::WarpOp op = lf[l0].wop;
      if (op == detail::WarpOp::kExchange) {  // one call over every lane's record
        void* records[32] = {};
        for (unsigned t = group; t; t &= t - 1) {
          const unsigned l = unsigned(__builtin_ctz(t));
          records[l] = reinterpret_cast<void*>(uintptr_t(lf[l].wval[0]));
        }
        const auto fn = reinterpret_cast<detail::WarpExchangeFn>(uintptr_t(lf[l0].wval[1]));
        if (const char* err = fn(records, group)) {
          *fault = where(ex) + ": warp " + std::to_string(w) + ": " + fiber_op_name(lf[l0]) +
                   " (" + site(lf[l0].file, lf[l0].line) + "): " + err;
          return -1;
        }
        for (unsigned t = group; t; t &= t - 1) lf[__builtin_ctz(t)].st = St::kRunnable;
        ex.warp_waiting[w] &= ~group;
        ++released;
        continue;
      }
      unsigned bits = 0;
      for (unsigned t = group; t; t &= t - 1) {
        const unsigned l = unsigned(__builtin_ctz(t));
        if (lf[l].wval[0] != 0 || lf[l].wval[1] != 0) bits |= 1u << l;
      }
      for (unsigned t = group; t; t &= t - 1) {
        const unsigned l = unsigned(__builtin_ctz(t));
        Fiber& f = lf[l];
        const int width = f.wwidth;
        if (width < 1 || width > 32 || (width & (width - 1))) {
          *fault = where(ex) + ": " + fiber_op_name(f) + " (" + site(f.file, f.line) + ") with width " +
                   std::to_string(width) + " (must be a power of 2 <= 32)";
          return -1;
        }
        switch (op) {
          case detail::WarpOp::kSync: break;
          case detail::WarpOp::kBallot:
            f.wres[0] = bits;
            f.wres[1] = 0;
            break;
          case detail::WarpOp::kAny: f.wres[0] = bits != 0; break;
          case detail::WarpOp::kAll: f.wres[0] = bits == group; break;
          default: {
            const int src = shuffle_source(op, l, f.warg, width);
            if (src < 0 || src >= 32 || !(group & (1u << src))) {
              // Reading a lane that is not taking part: undefined on the GPU; poison it.
              std::memset(f.wres, 0xff, sizeof(f.wres));
            } else {
              f.wres[0] = lf[src].wval[0];
              f.wres[1] = lf[src].wval[1];
            }
          }
        }
      }
      for (unsigned t = group; t; t &= t - 1) lf[__builtin_ctz(t)].st = St::kRunnable;
      ex.warp_waiting[w] &= ~group;
      ++released;
    }
  }
  return released;
}

// Releases every warp collective whose lanes have all arrived (see release_warp).
int release_warps(Executor& ex, unsigned n, std::string* fault) {
  int released = 0;
  for (unsigned w = 0; w < (n + 31) / 32; ++w) {
    const int r = release_warp(ex, n, w, -1, fault);
    if (r < 0) return r;
    released += r;
  }
  return released;
}

// Releases the block barrier when every live thread waits at it. Returns 1 when released, 0 when
// not every live thread is there, -1 with *fault set when they wait at different barriers.
int release_barrier(Executor& ex, unsigned n, std::string* fault) {
  unsigned at = 0;
  Fiber* first = nullptr;
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = ex.fibers[i];
    if (f.st == St::kBarrier) {
      ++at;
      if (!first) first = &f;
    } else if (f.st != St::kExited) {
      return 0;
    }
  }
  if (at == 0) return 0;
  int count = 0, all = 1, any = 0;
  bool same = true;
  for (unsigned i = 0; i < n; ++i) {
    const Fiber& f = ex.fibers[i];
    if (f.st != St::kBarrier) continue;
    same = same && f.line == first->line && f.bar_kind == first->bar_kind &&
           (f.file == first->file || std::strcmp(f.file, first->file) == 0);
    count += f.bar_pred != 0;
    all &= f.bar_pred != 0;
    any |= f.bar_pred != 0;
  }
  if (same) {
    const int result = first->bar_kind == 1 ? count : first->bar_kind == 2 ? all : any;
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = ex.fibers[i];
      if (f.st == St::kBarrier) {
        f.bar_result = result;
        f.st = St::kRunnable;
      }
    }
    return 1;
  }
  std::map<std::string, std::vector<unsigned>> sites;
  for (unsigned i = 0; i < n; ++i) {
    const Fiber& f = ex.fibers[i];
    if (f.st == St::kBarrier)
      sites[std::string(barrier_name(f.bar_kind)) + " at " + site(f.file, f.line)].push_back(i);
  }
  std::ostringstream os;
  os << where(ex) << ": divergent barrier: the block's threads wait at different barriers:";
  for (auto& [s, ids] : sites) os << " threads " << ranges(ids) << " at " << s << ";";
  *fault = os.str();
  return -1;
}

std::string describe_stall(const Executor& ex, unsigned n) {
  std::map<std::string, std::vector<unsigned>> sites;
  for (unsigned i = 0; i < n; ++i) {
    const Fiber& f = ex.fibers[i];
    if (f.st == St::kBarrier)
      sites[std::string(barrier_name(f.bar_kind)) + " at " + site(f.file, f.line)].push_back(i);
    else if (f.st == St::kWarp)
      sites[std::string(fiber_op_name(f)) + " at " + site(f.file, f.line) + " (mask 0x" + [&] {
        char b[16];
        std::snprintf(b, sizeof b, "%08x", f.wmask);
        return std::string(b);
      }() + ")"].push_back(i);
  }
  std::ostringstream os;
  os << where(ex) << ": deadlock: no thread can go on;";
  for (auto& [s, ids] : sites) os << " threads " << ranges(ids) << " wait at " << s << ";";
  return os.str();
}

void ensure_fibers(Executor& ex, unsigned n) {
  if (ex.fibers.size() < n) ex.fibers.resize(n);
}

// Gives the stacks of exited (and, after a fault, abandoned) fibers back.
void give_back_stacks(Executor& ex, unsigned n, bool all) {
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = ex.fibers[i];
    if (f.stack >= 0 && (all || f.st == St::kExited)) {
      ex.free_stacks.push_back(f.stack);
      f.stack = -1;
    }
  }
}

void ensure_smem(Executor& ex, size_t bytes) {
  if (bytes <= ex.smem_cap) return;
  void* p = std::aligned_alloc(kSmemAlign, (bytes + kSmemAlign - 1) / kSmemAlign * kSmemAlign);
  if (!p) {
    std::fprintf(stderr, "vt_emu: out of host memory for %zu bytes of shared memory\n", bytes);
    std::abort();
  }
  ex.smem.reset(static_cast<unsigned char*>(p));
  ex.smem_cap = bytes;
}

bool run_block(Executor& ex, uint3 bidx, bool reverse, std::string* fault) {
  const KernelRun& k = *ex.run;
  const unsigned bx = k.block.x, by = k.block.y;
  const unsigned n = k.block.x * k.block.y * k.block.z;
  ensure_fibers(ex, n);
  ex.block.idx = bidx;
  if (k.dyn_smem) std::memset(ex.smem.get(), 0xff, k.dyn_smem);
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = ex.fibers[i];
    f.t.idx = uint3{i % bx, (i / bx) % by, i / (bx * by)};
    f.t.linear = i;
    f.t.lane = i & 31;
    f.t.warp = i >> 5;
    f.t.async_copies.clear();  // a previous block's copies never land in this one
    f.t.async_groups.clear();
    f.st = St::kNotStarted;
  }
  const unsigned nwarps = (n + 31) / 32, tail = n - 32 * (nwarps - 1);
  ex.warp_waiting.assign(nwarps, 0u);
  ex.warp_exited.assign(nwarps, 0u);
  if (tail < 32) ex.warp_exited[nwarps - 1] = ~((1u << tail) - 1);
  ex.live = n;
  ex.n = n;
  ex.reverse = reverse;
  detail::tl_block = &ex.block;
  bool ok = true;
  for (;;) {
    ex.cursor = 0;
    if (Fiber* f = next_in_pass(ex)) {
      ex.running = f;
      detail::tl_thread = &f->t;
      ++ex.switches;
      fiber_switch(&ex.sched, &f->ctx);  // returns when the pass is over
      after_switch(ex);
    }
    ex.running = nullptr;
    detail::tl_thread = nullptr;
    if (!ex.pending_fault.empty()) {
      *fault = std::move(ex.pending_fault);
      ex.pending_fault.clear();
      ok = false;
      break;
    }
    if (ex.live == 0) break;
    // Lanes released by a collective's last arriver during the pass run in the next one.
    bool runnable = false;
    for (unsigned i = 0; i < n && !runnable; ++i) runnable = ex.fibers[i].st == St::kRunnable;
    if (runnable) continue;
    int r = release_warps(ex, n, fault);
    if (r > 0) continue;
    if (r == 0) r = release_barrier(ex, n, fault);
    if (r > 0) continue;
    if (r == 0) *fault = describe_stall(ex, n);
    ok = false;
    break;
  }
  if (!ok) give_back_stacks(ex, n, true);  // abandoned fibers: their stacks are reused
  detail::tl_block = nullptr;
  return ok;
}

uint3 block_index(uint64_t linear, const dim3& g) {
  return uint3{unsigned(linear % g.x), unsigned((linear / g.x) % g.y),
               unsigned(linear / (uint64_t(g.x) * g.y))};
}

// Runs blocks taken from a shared counter until none is left or one faults.
struct GridJob {
  const KernelRun* run = nullptr;
  uint64_t total = 0;
  bool reverse = false;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string fault;
};

void run_blocks(GridJob& job) {
  Executor& ex = tl_exec;
  const KernelRun& k = *job.run;
  ex.run = &k;
  ex.block.block_dim = k.block;
  ex.block.grid_dim = k.grid;
  ensure_smem(ex, k.dyn_smem);
  ex.block.dyn_smem = ex.smem.get();
  ex.block.dyn_smem_bytes = k.dyn_smem;
  const uint64_t sw0 = ex.switches;
  uint64_t blocks = 0;
  for (;;) {
    if (job.failed.load(std::memory_order_relaxed)) break;
    const uint64_t i = job.next.fetch_add(1);
    if (i >= job.total) break;
    const uint64_t lin = job.reverse ? job.total - 1 - i : i;
    std::string fault;
    ++blocks;
    if (!run_block(ex, block_index(lin, k.grid), job.reverse, &fault)) {
      std::lock_guard<std::mutex> lock(job.mu);
      if (!job.failed.exchange(true)) job.fault = fault;
      break;
    }
  }
  g_blocks += blocks;
  g_switches += ex.switches - sw0;
  ex.run = nullptr;
}

// Persistent helper threads for VT_EMU_BLOCK_WORKERS > 1: each launch wakes them, `wanted` of
// them join the calling thread in taking blocks from the job's counter.
class BlockPool {
 public:
  void run(GridJob& job, int workers) {
    std::unique_lock<std::mutex> lock(mu_);
    while (int(threads_.size()) < workers - 1) threads_.emplace_back([this] { loop(); });
    job_ = &job;
    wanted_ = workers - 1;
    claimed_ = finished_ = 0;
    ++generation_;
    cv_.notify_all();
    lock.unlock();
    run_blocks(job);
    lock.lock();
    done_cv_.wait(lock, [&] { return finished_ == wanted_; });
    job_ = nullptr;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (claimed_ >= wanted_) continue;
      ++claimed_;
      GridJob* job = job_;
      lock.unlock();
      run_blocks(*job);
      lock.lock();
      if (++finished_ == wanted_) done_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> threads_;  // detached at exit: they only ever wait on cv_
  GridJob* job_ = nullptr;
  int wanted_ = 0, claimed_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace

namespace detail {

void outside_kernel(const char* what) {
  std::fprintf(stderr,
               "vt_emu: %s used outside an emulated kernel (device code called from the host)\n",
               what);
  std::abort();
}

int block_barrier(int kind, int pred, const std::source_location& loc) {
  Fiber* f = running_fiber("__syncthreads");
  f->st = St::kBarrier;
  f->file = loc.file_name();
  f->line = loc.line();
  f->bar_kind = kind;
  f->bar_pred = pred;
  suspend(f);
  return f->bar_result;
}

void warp_collective(WarpOp op, unsigned mask, uint64_t value[2], unsigned size, int lane_arg,
                     int width, const std::source_location& loc) {
  Fiber* f = running_fiber(op_name(op));
  f->st = St::kWarp;
  f->wop = op;
  f->wmask = mask;
  f->wsize = size;
  f->warg = lane_arg;
  f->wwidth = width;
  f->wval[0] = value[0];
  f->wval[1] = value[1];
  f->file = loc.file_name();
  f->line = loc.line();
  // The last lane to arrive completes the collective and goes on without suspending.
  Executor& ex = tl_exec;
  const unsigned w = f->t.warp;
  ex.warp_waiting[w] |= 1u << f->t.lane;
  if ((mask & ~ex.warp_exited[w] & ~ex.warp_waiting[w]) == 0) {
    std::string fault;
    if (release_warp(ex, ex.n, w, int(f->t.lane), &fault) < 0 && ex.pending_fault.empty())
      ex.pending_fault = fault;
  }
  if (f->st != St::kRunnable) suspend(f);
  value[0] = f->wres[0];
  value[1] = f->wres[1];
}

void thread_fault(const char* what, const std::source_location& loc) {
  Fiber* f = running_fiber(what);
  Executor& ex = tl_exec;
  if (ex.pending_fault.empty())
    ex.pending_fault = where(ex) + ": thread " + std::to_string(f->t.linear) + ": " + what +
                       " (" + site(loc.file_name(), loc.line()) + ")";
}

void warp_exchange(const char* name, unsigned mask, void* record, WarpExchangeFn fn,
                   const std::source_location& loc) {
  uint64_t v[2] = {uint64_t(uintptr_t(record)), uint64_t(uintptr_t(fn))};
  Fiber* f = running_fiber(name);
  f->wname = name;
  warp_collective(WarpOp::kExchange, mask, v, 0, 0, 32, loc);
}

}  // namespace detail

void set_thread_order(ThreadOrder o) { g_order = o == ThreadOrder::kReverse ? 1 : 0; }

ThreadOrder thread_order() {
  int o = g_order.load();
  if (o < 0) {
    const char* env = std::getenv("VT_EMU_THREAD_ORDER");
    o = env && std::strcmp(env, "reverse") == 0 ? 1 : 0;
    if (env && std::strcmp(env, "reverse") != 0 && std::strcmp(env, "forward") != 0) {
      std::fprintf(stderr, "vt_emu: VT_EMU_THREAD_ORDER must be forward or reverse, got '%s'\n",
                   env);
      std::abort();
    }
    g_order = o;
  }
  return o == 1 ? ThreadOrder::kReverse : ThreadOrder::kForward;
}

void set_block_workers(int n) { g_workers = std::max(1, n); }

int block_workers() {
  int w = g_workers.load();
  if (w == 0) {
    const char* env = std::getenv("VT_EMU_BLOCK_WORKERS");
    w = env ? std::max(1, std::atoi(env)) : 1;
    g_workers = w;
  }
  return w;
}

SimtStats simt_stats() {
  SimtStats s;
  s.kernels = g_kernels.load();
  s.blocks = g_blocks.load();
  s.threads = g_threads.load();
  s.switches = g_switches.load();
  return s;
}

std::string run_kernel(const KernelRun& k) {
  const uint64_t total = uint64_t(k.grid.x) * k.grid.y * k.grid.z;
  ++g_kernels;
  g_threads += total * k.block.x * k.block.y * k.block.z;
  GridJob job;
  job.run = &k;
  job.total = total;
  job.reverse = thread_order() == ThreadOrder::kReverse;
  const int workers = int(std::min<uint64_t>(uint64_t(block_workers()), total));
  if (workers <= 1) {
    run_blocks(job);
  } else {
    static BlockPool& pool = *new BlockPool;  // never destroyed: its threads outlive main
    static std::mutex pool_mu;  // one multi-worker launch at a time
    std::lock_guard<std::mutex> lock(pool_mu);
    pool.run(job, workers);
  }
  return job.failed ? job.fault : std::string();
}

}  // namespace vt_emu
