// Communication watchdog: communicators mark "this thread is inside operation OP on group G
// since time t" with a CommOpScope around every collective / point-to-point call (two atomic
// stores and a clock read), and a background thread that wakes about once a second aborts the
// whole job with a message naming the rank, the operation and the group when one call has been
// running longer than the timeout (default 300 s; env VTRAIN_COMM_TIMEOUT or set_comm_timeout).
// A rank that died or took another code path otherwise leaves its peers blocked forever.
#pragma once
#include <string>

namespace vt {

constexpr double kDefaultCommTimeoutSeconds = 300;

// A stable (never freed) copy of a group name, for CommOpScope: call once per communicator.
const char* intern_group_name(const std::string& name);

// Marks the calling thread as inside `op` ("all-reduce", "recv", ...; a string literal) on
// group `group` (from intern_group_name) until destroyed; `peer` is the group rank of the other
// side of a point-to-point call, -1 for collectives. Scopes nest (the outer one is restored).
class CommOpScope {
 public:
  CommOpScope(const char* op, const char* group, int peer = -1);
  ~CommOpScope();
  CommOpScope(const CommOpScope&) = delete;
  CommOpScope& operator=(const CommOpScope&) = delete;

 private:
  int slot_;
  long long saved_since_;
  const char* saved_op_;
  const char* saved_group_;
  int saved_peer_;
};

// Seconds one communication call may take before the job is aborted; <= 0 disables the
// watchdog. The initial value comes from VTRAIN_COMM_TIMEOUT (seconds) or the default above.
void set_comm_timeout(double seconds);
double comm_timeout();

// Starts the watchdog thread (idempotent). It runs until the process exits; on a timeout it
// prints `vtrain: rank R: stuck for N s in OP on the G group (...); aborting` and MPI_Abort's.
void start_comm_watchdog();

// Wall seconds this process has spent inside communication calls (outermost scopes only).
double comm_seconds_total();

// The message the watchdog prints for a call stuck for `seconds` (exposed for tests).
std::string stuck_message(double seconds, const char* op, const char* group, int peer);

}  // namespace vt
