// Synchronous and background checkpoint writes (see checkpoint_writer.h).
#include "train/checkpoint_writer.h"

#include <cstdio>

#include "checkpoint/checkpoint_dir.h"
#include "train/run_state.h"
#include "parallel/mpi_communicator.h"

namespace vt {

void fill_snapshot(CheckpointSnapshot& snap, int64_t step, const ModelConfig& cfg,
                   const ParamStore& store, CheckpointMeta meta, optim::DistributedOptimizer& opt,
                   bool copy_params) {
  snap.step = step;
  snap.cfg = cfg;
  snap.meta = std::move(meta);
  gather_optimizer_states(store, opt, snap.states);
  if (!copy_params)
    snap.params = store;  // shares the live host arrays
  else if (snap.params.finalized() && snap.params.size() == store.size())
    snap.params.copy_params_from(store);  // the buffers of the last snapshot (same parameters)
  else
    snap.params = store.host_mirror();
}

absl::StatusOr<std::unique_ptr<CheckpointWriter>> CheckpointWriter::create(
    Communicator* world, const ProcessGrid& grid, std::string dir, int keep_last, bool async) {
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter());
  w->dir_ = std::move(dir);
  w->keep_last_ = keep_last;
  w->grid_ = &grid;
  if (!async) return w;
  if (world->size() == 1) {
    // One process: the checkpoint code makes no MPI calls; the writer shares the grid.
    w->async_ = true;
    return w;
  }
  if (!MpiSession::thread_multiple()) {
    if (world->rank() == 0)
      std::fprintf(stderr, "vtrain: warning: --async-save needs MPI_THREAD_MULTIPLE, which this "
                           "MPI does not provide; checkpoints are written synchronously\n");
    return w;
  }
  auto* mpi = dynamic_cast<MpiCommunicator*>(world);
  if (mpi == nullptr) return w;
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(mpi->comm(), &dup);
  w->world_dup_ = std::make_unique<MpiCommunicator>(dup, "checkpoint-writer");
  w->own_grid_ = std::make_unique<ProcessGrid>(w->world_dup_.get(), grid.shape());
  w->async_ = true;
  return w;
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

absl::Status CheckpointWriter::wait() {
  if (!thread_.joinable()) return absl::OkStatus();
  thread_.join();
  absl::Status st = last_;
  last_ = absl::OkStatus();
  return st;
}

CheckpointSnapshot CheckpointWriter::take_buffers() {
  VT_CHECK_MSG(!thread_.joinable(), "take_buffers while a background save runs");
  return std::move(spare_);
}

absl::Status CheckpointWriter::write(CheckpointSnapshot snap,
                                     std::function<void(const std::string&, const SaveTimings&)> on_written) {
  VT_RETURN_IF_ERROR(wait());
  const ProcessGrid* grid = own_grid_ ? own_grid_.get() : grid_;
  const bool rank0 = grid->world()->rank() == 0;
  auto job = [this, grid, rank0, snap = std::move(snap), on_written]() mutable -> absl::Status {
    SaveTimings times;
    absl::StatusOr<std::string> path = save_checkpoint_in_dir(
        dir_, snap.step, snap.cfg, snap.params, snap.meta, snap.states, grid, keep_last_, &times);
    spare_ = std::move(snap);  // read by take_buffers only after this thread is joined
    if (!path.ok()) return path.status();
    if (rank0 && on_written) on_written(*path, times);
    return absl::OkStatus();
  };
  if (!async_) return job();
  thread_ = std::thread([this, job = std::move(job)]() mutable { last_ = job(); });
  return absl::OkStatus();
}

}  // namespace vt
