// Writes a run's checkpoints into --ckpt-dir, synchronously or in the background (--async-save).
// A save first takes a snapshot of the step's state into host memory (the parameters copied out
// of the store, the optimizer states gathered over data parallelism: collective, on the training
// thread), then writes it with save_checkpoint_in_dir (.tmp, verify, rename, `latest`, keep-last
// K: the same file and the same crash guarantees either way). Asynchronously, a background thread
// writes while training goes on; it uses a duplicate of the world communicator and a process grid
// of its own, so its collectives never meet the training thread's (MPI_THREAD_MULTIPLE), and it is
// the only user of HDF5 while it runs (the next save, and the end of the run, wait for it). The
// snapshot costs the host memory of the parameters and optimizer states once more, held for the
// run: a written snapshot's buffers are handed back for the next one (take_buffers), so taking
// it copies into pages already mapped (755 MB at d12: 0.06 s, against 0.36 s into fresh pages).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "core/arena.h"
#include "core/communicator.h"
#include "optim/distributed_optimizer.h"
#include "parallel/process_grid.h"

namespace vt {

struct CheckpointSnapshot {
  int64_t step = 0;
  ModelConfig cfg;
  ParamStore params;               // a host store of its own (not a view of the live one)
  CheckpointMeta meta;
  std::vector<NamedTensor> states;  // host tensors of their own
};

class CheckpointWriter {
 public:
  // Collective over `world` (the duplicate communicator and the writer's grid). `async` needs
  // MPI_THREAD_MULTIPLE on a multi-rank world; without it the writer says so and writes
  // synchronously (asynchronous() is false).
  static absl::StatusOr<std::unique_ptr<CheckpointWriter>> create(Communicator* world,
                                                                  const ProcessGrid& grid,
                                                                  std::string dir, int keep_last,
                                                                  bool async);
  ~CheckpointWriter();

  bool asynchronous() const { return async_; }
  // Collective. Writes `snap`: now, or in the background after the previous background write is
  // done (its error, if any, is returned instead and `snap` is not written). `on_written(path,
  // seconds)` runs on rank 0 when the file is complete (on the writer's thread when async).
  absl::Status write(CheckpointSnapshot snap,
                     std::function<void(const std::string&, const SaveTimings&)> on_written);
  // Collective: waits for a background write; its status, the same on every rank.
  absl::Status wait();
  // The buffers to take the next snapshot into: the last written snapshot (reuse its tensors
  // and store; fill_snapshot does), or an empty one. Call after wait().
  CheckpointSnapshot take_buffers();

 private:
  CheckpointWriter() = default;
  std::string dir_;
  int keep_last_ = 0;
  bool async_ = false;
  const ProcessGrid* grid_ = nullptr;           // the training grid (synchronous writes)
  std::unique_ptr<Communicator> world_dup_;      // the writer thread's world (async, multi-rank)
  std::unique_ptr<ProcessGrid> own_grid_;
  std::thread thread_;
  absl::Status last_;        // the background write's status (valid once joined)
  CheckpointSnapshot spare_;  // the last written snapshot, for take_buffers
};

// Collective (the optimizer states are gathered over DP). Fills `snap` (from take_buffers) with
// the step's state: the optimizer states into its tensors; the parameters copied into its host
// store when `copy_params` (a background save: training goes on changing them; a device store),
// else `snap.params` shares the live host store (a synchronous save reads it in place).
void fill_snapshot(CheckpointSnapshot& snap, int64_t step, const ModelConfig& cfg,
                   const ParamStore& store, CheckpointMeta meta, optim::DistributedOptimizer& opt,
                   bool copy_params);

}  // namespace vt
