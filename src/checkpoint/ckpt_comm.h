// CkptComm: the group of ranks that writes or reads one checkpoint together, with the few
// collectives the checkpoint code needs (sums of 64-bit checksums, string broadcast and gather,
// agreeing on an error). A null grid, or a grid over a one-rank non-MPI world, is a single
// process that makes no MPI calls at all (so single-process tools and unit tests need no
// MPI_Init); so is any one-rank grid (the POSIX HDF5 driver); a grid of several ranks over an
// MpiCommunicator uses its MPI_Comm (and the MPI-IO HDF5 driver for loading and verifying).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/process_grid.h"

namespace vt::ckpt {

class CkptComm {
 public:
  CkptComm() = default;  // a single process
  static absl::StatusOr<CkptComm> from_grid(const ProcessGrid* grid);

  MPI_Comm comm() const { return comm_; }  // MPI_COMM_NULL for a single process
  int rank() const { return rank_; }
  int size() const { return size_; }

  // In-place element-wise sum (mod 2^64) over the ranks.
  void sum(std::vector<uint64_t>& v) const;
  // Root's string on every rank.
  std::string broadcast(const std::string& s, int root = 0) const;
  // Every rank's string, in rank order.
  std::vector<std::string> all_gather(const std::string& s) const;
  // The same status on every rank: OK when every rank passed OK, else the failing status of the
  // lowest failing rank (its code and message). Every rank must call.
  absl::Status agree(const absl::Status& local) const;
  void barrier() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace vt::ckpt
