// Failure handling for multi-rank runs: a failure on one rank must end the whole job with a
// message naming the rank and the reason, never leave the other ranks waiting in a collective.
//  - run_guarded(fn): the entry wrapper for an MPI main (exceptions, error statuses, crash
//    signals, and the communication watchdog of comm_watchdog.h);
//  - all_ok(comm, status): agree on a status only some ranks can see, so every rank returns the
//    same error and the job exits cleanly with one message.
#pragma once
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "parallel/comm_watchdog.h"
#include "core/communicator.h"

namespace vt {

// Collective over `comm`: OK on every rank when `local` is OK on every rank; otherwise every rank
// gets the error (code and message) of the lowest failing rank of `comm`, its message prefixed
// by `rank R: ` (R its world rank; only when the world has several ranks) and suffixed with the
// count of other failing ranks, and marked as agreed (see is_agreed). Messages longer than 4000
// bytes are cut. Every rank of `comm` must call it (it is two collectives).
absl::Status all_ok(Communicator* comm, const absl::Status& local);

// Whether `s` came from all_ok, i.e. every rank holds the same error and may exit normally.
bool is_agreed(const absl::Status& s);
// Marks `s` as agreed (for errors that every rank computes identically by construction).
absl::Status agreed(absl::Status s);

// Prints `vtrain: rank R: crashed with signal N (SIGSEGV)` on SIGSEGV/SIGABRT/SIGFPE/SIGBUS and
// then lets the previous handler (OpenMPI's backtrace, or the default) end the process; mpirun
// sees the rank die and ends the job. Call after MPI_Init (MPI installs its own handlers).
void install_crash_handlers();

namespace detail {
int guarded_status_exit(const absl::Status& s);
int guarded_code_exit(int code);
int guarded_exception(const std::string& what);
void guarded_start();
}  // namespace detail

// Runs the body of an MPI main: installs the crash handlers, starts the communication watchdog,
// and calls fn() (returning absl::Status or int). Then:
//  - OK / 0: returns 0 (the caller's MpiSession finalizes);
//  - an agreed error (all_ok): rank 0 prints `vtrain: error: MSG`, every rank returns 2;
//  - any other error, non-zero code or exception: with one rank, prints `vtrain: error: MSG`
//    and returns 2 (or the code); with several, abort_job("...") so the peers cannot hang.
template <class Fn>
int run_guarded(Fn&& fn) {
  detail::guarded_start();
  try {
    using R = std::invoke_result_t<Fn&>;
    if constexpr (std::is_same_v<R, absl::Status>) {
      return detail::guarded_status_exit(fn());
    } else {
      static_assert(std::is_convertible_v<R, int>, "run_guarded: fn must return Status or int");
      return detail::guarded_code_exit(static_cast<int>(fn()));
    }
  } catch (const std::exception& e) {
    return detail::guarded_exception(e.what());
  } catch (...) {
    return detail::guarded_exception("unknown exception");
  }
}

}  // namespace vt
