// PrepareGroup implementations: one process, and MPI_COMM_WORLD (MPI_Allgather(v), MPI_Gatherv,
// MPI_Bcast on bytes and int64).
#include "data/prepare_group.h"

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "parallel/comm_watchdog.h"

namespace vt::data {

absl::Status PrepareGroup::agree(const absl::Status& st) {
  const std::vector<int64_t> failed = all_gather({st.ok() ? 0 : 1});
  int first = -1;
  for (int r = 0; r < size() && first < 0; ++r)
    if (failed[r]) first = r;
  if (first < 0) return absl::OkStatus();
  if (size() == 1) return st;
  // The failing rank's message, for every rank (rank 0 prints it).
  std::vector<std::string> msgs = gather_bytes(st.ok() ? "" : std::string(st.message()));
  std::string msg = rank() == 0 ? msgs[first] : "";
  broadcast_bytes(msg);
  if (first == rank()) return st;
  return absl::Status(absl::StatusCode::kAborted, msg);
}

namespace {

class SingleGroup final : public PrepareGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}
  std::vector<int64_t> all_gather(const std::vector<int64_t>& mine) override { return mine; }
  std::vector<int64_t> all_sum(const std::vector<int64_t>& mine) override { return mine; }
  std::vector<std::string> gather_bytes(const std::string& mine) override { return {mine}; }
  void broadcast_bytes(std::string&) override {}
};

class MpiGroup final : public PrepareGroup {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Each collective runs under the communication watchdog (parallel/comm_watchdog.h): a rank
  // that stalls or dies ends the job after the timeout instead of hanging the others.
  void barrier() override {
    CommOpScope watch("prepare barrier", group());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::vector<int64_t> all_gather(const std::vector<int64_t>& mine) override {
    CommOpScope watch("prepare all-gather", group());
    std::vector<int64_t> out(mine.size() * size_);
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, out.data(),
                  static_cast<int>(mine.size()), MPI_INT64_T, MPI_COMM_WORLD);
    return out;
  }
  std::vector<int64_t> all_sum(const std::vector<int64_t>& mine) override {
    CommOpScope watch("prepare all-reduce", group());
    std::vector<int64_t> out(mine.size());
    MPI_Allreduce(mine.data(), out.data(), static_cast<int>(mine.size()), MPI_INT64_T, MPI_SUM,
                  MPI_COMM_WORLD);
    return out;
  }
  std::vector<std::string> gather_bytes(const std::string& mine) override {
    // Sizes first, then the bytes in pieces below 2 GiB (MPI counts are int).
    const std::vector<int64_t> sizes = all_gather({static_cast<int64_t>(mine.size())});
    CommOpScope watch("prepare gather", group());
    std::vector<std::string> out;
    if (rank_ == 0) {
      out.resize(size_);
      out[0] = mine;
    }
    constexpr int64_t kPiece = 1 << 30;
    for (int r = 1; r < size_; ++r) {
      for (int64_t off = 0; off < sizes[r]; off += kPiece) {
        const int n = static_cast<int>(std::min(kPiece, sizes[r] - off));
        if (rank_ == r) {
          MPI_Send(mine.data() + off, n, MPI_BYTE, 0, 77, MPI_COMM_WORLD);
        } else if (rank_ == 0) {
          if (off == 0) out[r].resize(sizes[r]);
          MPI_Recv(out[r].data() + off, n, MPI_BYTE, r, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
      }
    }
    return out;
  }
  void broadcast_bytes(std::string& data) override {
    CommOpScope watch("prepare broadcast", group());
    int64_t n = static_cast<int64_t>(data.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    data.resize(n);
    constexpr int64_t kPiece = 1 << 30;
    for (int64_t off = 0; off < n; off += kPiece)
      MPI_Bcast(data.data() + off, static_cast<int>(std::min(kPiece, n - off)), MPI_BYTE, 0,
                MPI_COMM_WORLD);
  }

 private:
  static const char* group() {
    static const char* name = intern_group_name("world");
    return name;
  }
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<PrepareGroup> make_single_group() { return std::make_unique<SingleGroup>(); }
std::unique_ptr<PrepareGroup> make_mpi_world_group() { return std::make_unique<MpiGroup>(); }

}  // namespace vt::data
