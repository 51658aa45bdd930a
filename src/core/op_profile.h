// Per-op wall-time profile of the tensor ops (the dispatch in core/ops.cc): calls, seconds and,
// for GEMMs, FLOPs per op name, accumulated while enabled (`vtrain train --profile`). Host time:
// exact for the CPU backend; for a device backend it is the launch time of asynchronous work.
// Only the outermost op counts: an op that runs inside another op's dispatch is its caller's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vt::op_profile {

void enable(bool on);
bool enabled();
void reset();

struct Entry {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // GEMMs only (2 M N K per call)
};
// Every op seen since the last reset, the most expensive first.
std::vector<Entry> entries();

// The table `--profile` prints: per op its calls and milliseconds per step, share of the step's
// wall time, GFLOP/s where FLOPs are known; then the ops' sum and the rest of the step
// (communication, data loading, host work outside the ops).
std::string report(double step_wall_seconds, int64_t steps);

// Times one op from construction to destruction when profiling is on (the outermost only).
class Scope {
 public:
  explicit Scope(const char* op, double flops = 0);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* op_ = nullptr;  // null: not recording
  double flops_ = 0, t0_ = 0;
};

// Turns profiling off for its lifetime (evaluation and checkpoints inside a profiled run).
class Pause {
 public:
  Pause();
  ~Pause();

 private:
  bool was_;
};

}  // namespace vt::op_profile
