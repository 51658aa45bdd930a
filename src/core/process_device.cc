// Node-local rank and device index of this process (see process_device.h).
#include "core/process_device.h"

#include <cstdlib>
#include <initializer_list>

#include "core/check.h"

namespace vt {

namespace {

// The first of `names` that is set to a non-negative integer, else -1.
int env_int(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end && *end == '\0' && x >= 0) return int(x);
  }
  return -1;
}

}  // namespace

int node_local_rank() {
  const int r = env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"});
  return r < 0 ? 0 : r;
}

int node_local_size() {
  const int n = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"});
  return n < 1 ? 1 : n;
}

int process_device_index(int device_count) {
  VT_CHECK_MSG(device_count >= 1, "process_device_index: no CUDA device");
  return node_local_rank() % device_count;
}

}  // namespace vt
