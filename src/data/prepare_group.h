// PrepareGroup: the processes one `vtrain prepare` is split over (every rank of an mpirun job, or
// one process), with the few collectives preparation needs: gathering integers and byte strings,
// broadcasting bytes, and agreeing on an error so that every rank stops with the same message.
// Work never depends on how many ranks there are, only who does it does (prepare.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vt::data {

class PrepareGroup {
 public:
  virtual ~PrepareGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // Every rank's `mine` (the same length on every rank), concatenated in rank order.
  virtual std::vector<int64_t> all_gather(const std::vector<int64_t>& mine) = 0;
  // Sum over ranks, element-wise.
  virtual std::vector<int64_t> all_sum(const std::vector<int64_t>& mine) = 0;
  // Rank 0 receives every rank's bytes (in rank order); others get an empty vector.
  virtual std::vector<std::string> gather_bytes(const std::string& mine) = 0;
  // Rank 0's `data` on every rank.
  virtual void broadcast_bytes(std::string& data) = 0;
  // Collective: OK when every rank's `st` is OK; else the error of the lowest failing rank, on
  // every rank (others get "rank R: message").
  absl::Status agree(const absl::Status& st);
};

// This process alone.
std::unique_ptr<PrepareGroup> make_single_group();
// MPI_COMM_WORLD (MPI must be initialized by the caller).
std::unique_ptr<PrepareGroup> make_mpi_world_group();

}  // namespace vt::data
