// Per-op time profile of the tensor ops (the dispatch in core/ops.cc): calls, seconds and, for
// GEMMs, FLOPs per op name, accumulated while enabled (`vtrain train --profile`). An op on the
// CPU is timed by the host clock. An op on a device is timed by the device's clock when one is
// set (set_device_clock: the CUDA backend's events on its stream, bracketing the op's kernels),
// else by the host clock, which then measures only the launch of asynchronous work.
// Only the outermost op counts: an op that runs inside another op's dispatch is its caller's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vt::op_profile {

void enable(bool on);
bool enabled();
void reset();

// A device's clock: marks taken on the stream the device's ops run on, read later, so that timing
// an op does not wait for the device. Marks are handles into a pool the clock owns.
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  // Enqueues a timestamp behind the work queued so far; returns its handle.
  virtual int mark() = 0;
  // Seconds from mark a to mark b (waits for b to be reached).
  virtual double seconds_between(int a, int b) = 0;
  // Every mark has been read: the pool may be reused.
  virtual void recycle() = 0;
  // What the report calls this clock ("CUDA events").
  virtual const char* name() const = 0;
};
// The clock of device ops (null: the host clock for them too). The caller keeps it alive until it
// sets another or null; setting one resolves the marks of the one before.
void set_device_clock(DeviceClock* clock);

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
  // on_device: the op's work runs on a device (timed by the device clock when one is set).
  explicit Scope(const char* op, double flops = 0, bool on_device = false);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* op_ = nullptr;  // null: not recording
  double flops_ = 0, t0_ = 0;
  DeviceClock* clock_ = nullptr;  // the device clock of this op, or null (host time)
  int mark0_ = -1;
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
