// fault_demo: an MPI program that injects one failure on one rank, to show (and test, see
// tests/mpi/test_failures.py) that run_guarded, all_ok and the communication watchdog end the
// whole job with a message naming the rank and the reason instead of hanging.
//   mpirun -np 3 fault_demo MODE [K] [--steps N] [--step-ms MS] [--pid-dir DIR]
// MODE: ok | throw-on-rank | error-on-rank | bad-input-on-rank | segv-on-rank | check-on-rank
//       | hang-on-rank (rank K skips the step's all-reduce and sleeps; set VTRAIN_COMM_TIMEOUT)
//       | hang-at-exit-on-rank (rank K sleeps instead of exiting; the others wait in finalize).
// Every rank runs `steps` steps of an all-reduce (sleeping step-ms between them); rank K fails
// at step 2. With --pid-dir each rank writes DIR/rank_R.pid first (for kill tests).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"

namespace vt {
namespace {

constexpr char kUsage[] =
    "usage: fault_demo ok|throw-on-rank|error-on-rank|bad-input-on-rank|segv-on-rank|"
    "check-on-rank|hang-on-rank|hang-at-exit-on-rank [K] [--steps N] [--step-ms MS] "
    "[--pid-dir DIR]";
constexpr int kFaultStep = 2;

absl::Status demo(int argc, char** argv) {
  // Every rank parses the same arguments, so a usage error is the same everywhere (agreed).
  if (argc < 2) return agreed(absl::InvalidArgumentError(kUsage));
  const std::string mode = argv[1];
  if (mode != "ok" && mode != "throw-on-rank" && mode != "error-on-rank" &&
      mode != "bad-input-on-rank" && mode != "segv-on-rank" && mode != "check-on-rank" &&
      mode != "hang-on-rank" && mode != "hang-at-exit-on-rank")
    return agreed(absl::InvalidArgumentError(absl::StrCat("unknown mode '", mode, "'\n", kUsage)));
  int victim = -1, steps = 5, step_ms = 0;
  std::string pid_dir;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--step-ms" && i + 1 < argc) step_ms = std::atoi(argv[++i]);
    else if (a == "--pid-dir" && i + 1 < argc) pid_dir = argv[++i];
    else if (victim < 0 && !a.empty() && a[0] != '-') victim = std::atoi(a.c_str());
    else
      return agreed(absl::InvalidArgumentError(absl::StrCat("bad argument '", a, "'\n", kUsage)));
  }
  if (mode != "ok" && victim < 0)
    return agreed(
        absl::InvalidArgumentError(absl::StrCat("mode ", mode, " needs a rank K\n", kUsage)));

  MpiCommunicator world(MPI_COMM_WORLD);
  const int rank = world.rank();
  if (victim >= world.size())
    return agreed(absl::InvalidArgumentError(
        absl::StrCat("rank ", victim, " does not exist with ", world.size(), " ranks")));
  if (!pid_dir.empty()) {
    const std::string path = absl::StrCat(pid_dir, "/rank_", rank, ".pid");
    std::ofstream(path + ".tmp") << getpid() << "\n";
    std::rename((path + ".tmp").c_str(), path.c_str());
  }

  if (mode == "bad-input-on-rank") {
    // What a data directory present on some nodes only looks like: only rank K sees the error.
    absl::Status local = absl::OkStatus();
    if (rank == victim)
      local = absl::NotFoundError(
          "data file /nonexistent/vtrain-demo/train_000.bin not found on this node; copy the "
          "data directory to every node or put it on a shared file system");
    return all_ok(&world, local);
  }

  const bool me = rank == victim;
  for (int step = 0; step < steps; ++step) {
    if (me && step == kFaultStep) {
      if (mode == "throw-on-rank")
        throw std::runtime_error(absl::StrCat("injected failure at step ", step));
      if (mode == "error-on-rank")
        return absl::InternalError(absl::StrCat("injected error status at step ", step));
      if (mode == "segv-on-rank") {
        volatile int* p = nullptr;
        *p = 1;
      }
      if (mode == "check-on-rank") VT_CHECK_MSG(step < 0, "injected invariant failure");
      if (mode == "hang-on-rank") {
        // Diverge: skip the all-reduce the others are waiting in, and never come back.
        std::this_thread::sleep_for(std::chrono::hours(1));
      }
    }
    double v = rank + 1;
    world.all_reduce_sum(&v, 1);
    const double want = world.size() * (world.size() + 1) / 2.0;
    if (v != want) return absl::InternalError(absl::StrCat("all-reduce gave ", v, ", want ", want));
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  if (mode == "hang-at-exit-on-rank") {
    // No collective at the end: the others go straight to MPI_Finalize, which waits for rank K.
    if (me) std::this_thread::sleep_for(std::chrono::hours(1));
    return absl::OkStatus();
  }
  world.barrier();
  if (rank == 0) std::printf("fault_demo: ok after %d steps on %d ranks\n", steps, world.size());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vt

int main(int argc, char** argv) {
  vt::MpiSession mpi(&argc, &argv);
  return vt::run_guarded([&] { return vt::demo(argc, argv); });
}
