// `vtrain train` on one rank or under mpirun (cli/train_flags.h, train/trainer.h). Errors end every
// rank (parallel/failure.h: run_guarded); a stop request that saved a checkpoint exits with
// kExitRequeue.
#include <cstdio>

#include "cli/commands.h"
#include "core/flags.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "cli/train_flags.h"
#include "train/trainer.h"

namespace vt::cli {

int cmd_train(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", train_usage().c_str());
    return 0;
  }
  install_stop_signal_handlers();
  MpiSession mpi(&argc, &argv);
  MpiCommunicator world(MPI_COMM_WORLD);
  Communicator* comm = world.size() > 1 ? static_cast<Communicator*>(&world) : self_communicator();
  bool requeue = false;
  const int code = run_guarded([&]() -> absl::Status {
    auto o = parse_train_options(argc, argv, 2);
    // Every rank parses its own command line and checks its own files (--data may be missing on
    // one node; MPMD launches give ranks different flags): agreed over the world, so any rank's
    // error ends every rank promptly with that rank's message, printed once by rank 0.
    VT_RETURN_IF_ERROR(all_ok(comm, o.status()));
    o->command.assign(argv, argv + argc);
    absl::Status st = run_train(*o, comm);
    if (absl::IsAborted(st)) {  // stopped by a signal after saving: resumable
      requeue = true;
      return absl::OkStatus();
    }
    return st;
  });
  return code == 0 && requeue ? kExitRequeue : code;
}

}  // namespace vt::cli
