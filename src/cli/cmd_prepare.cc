// `vtrain prepare`: a corpus -> a data directory (data/prepare.h), on one process or split over
// an mpirun job. Only rank 0 prints an error (every rank returns the same one).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/flags.h"
#include "data/prepare.h"
#include "data/prepare_group.h"
#include "parallel/mpi_communicator.h"

namespace vt::cli {

int cmd_prepare(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", data::prepare_usage().c_str());
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  absl::StatusOr<data::PrepareOptions> po = data::parse_prepare_args(args);
  if (!po.ok()) return report_error("prepare", std::string(po.status().message()).c_str());
  MpiSession mpi(&argc, &argv);
  std::unique_ptr<data::PrepareGroup> group =
      mpi.world_size() > 1 ? data::make_mpi_world_group() : data::make_single_group();
  const absl::Status st = data::prepare_data(*po, *group);
  if (!st.ok()) {
    std::fflush(stdout);
    if (mpi.world_rank() == 0) return report_error("prepare", std::string(st.message()).c_str());
    return 2;
  }
  return 0;
}

}  // namespace vt::cli
