// CkptComm (see ckpt_comm.h).
#include "checkpoint/ckpt_comm.h"

#include "parallel/comm_watchdog.h"
#include "parallel/mpi_communicator.h"

namespace vt::ckpt {

namespace {
// Every collective below runs under the communication watchdog (parallel/comm_watchdog.h): a
// rank that stalls or dies during a save or a load ends the job after the timeout, with the
// operation named, instead of leaving its peers in MPI forever.
const char* group_name() {
  static const char* name = intern_group_name("checkpoint");
  return name;
}
}  // namespace

absl::StatusOr<CkptComm> CkptComm::from_grid(const ProcessGrid* grid) {
  CkptComm c;
  if (grid == nullptr) return c;
  Communicator* world = grid->world();
  // One rank: the POSIX driver (no MPI-IO layer between HDF5 and the file; measured in
  // bench/bench_checkpoint.py), no MPI calls.
  if (world->size() == 1) return c;
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(world)) {
    c.comm_ = mpi->comm();
    c.rank_ = mpi->rank();
    c.size_ = mpi->size();
    return c;
  }
  if (world->size() != 1)
    return absl::InvalidArgumentError(
        "parallel checkpoints need the grid's world to be an MpiCommunicator");
  return c;
}

void CkptComm::sum(std::vector<uint64_t>& v) const {
  if (comm_ == MPI_COMM_NULL || v.empty()) return;
  CommOpScope watch("checkpoint checksum sum", group_name());
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_UINT64_T, MPI_SUM, comm_);
}

std::string CkptComm::broadcast(const std::string& s, int root) const {
  if (comm_ == MPI_COMM_NULL) return s;
  CommOpScope watch("checkpoint broadcast", group_name());
  int64_t n = rank_ == root ? static_cast<int64_t>(s.size()) : 0;
  MPI_Bcast(&n, 1, MPI_INT64_T, root, comm_);
  std::string out = rank_ == root ? s : std::string(n, '\0');
  if (n > 0) MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, comm_);
  return out;
}

std::vector<std::string> CkptComm::all_gather(const std::string& s) const {
  if (comm_ == MPI_COMM_NULL) return {s};
  CommOpScope watch("checkpoint all-gather", group_name());
  int n = static_cast<int>(s.size());
  std::vector<int> sizes(size_), displs(size_);
  MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm_);
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[r] = total;
    total += sizes[r];
  }
  std::string all(total, '\0');
  MPI_Allgatherv(s.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, comm_);
  std::vector<std::string> out(size_);
  for (int r = 0; r < size_; ++r) out[r] = all.substr(displs[r], sizes[r]);
  return out;
}

absl::Status CkptComm::agree(const absl::Status& local) const {
  if (comm_ == MPI_COMM_NULL) return local;
  CommOpScope watch("checkpoint status agreement", group_name());
  int mine = local.ok() ? size_ : rank_, first = size_;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_);
  if (first == size_) return absl::OkStatus();
  int code = static_cast<int>(local.code());
  MPI_Bcast(&code, 1, MPI_INT, first, comm_);
  const std::string msg = broadcast(std::string(local.message()), first);
  return absl::Status(static_cast<absl::StatusCode>(code), msg);
}

void CkptComm::barrier() const {
  if (comm_ == MPI_COMM_NULL) return;
  CommOpScope watch("checkpoint barrier", group_name());
  MPI_Barrier(comm_);
}

}  // namespace vt::ckpt
