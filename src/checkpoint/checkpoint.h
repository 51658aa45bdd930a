// Checkpoints (HDF5, docs/design.md "Checkpoints"): one file per checkpoint, written by every rank
// of the grid (or by one process with a null grid). Every parameter (/model/<name>) and optimizer
// state (/optim/<param>/<kind>) is stored with its GLOBAL shape as one contiguous float32 block;
// each rank writes the box of its local shard, one owner per replicated box (checkpoint_plan.h),
// so a checkpoint loads on any dp x tp x pp layout. Root attributes:
//   format "vtrain-checkpoint", format_version, library_version, checksum_algorithm,
//   config (JSON), step, tokens (int64), loader_state, rng_state, extra, layout (JSON; layout is
//   informational only). Each dataset has a "checksum" attribute (checksum.h: layout-independent).
// Saving: rank 0 lays out `<path>.tmp` with HDF5 (header, every dataset allocated, the whole file
// reserved on the disk); every rank writes its boxes' bytes there with pwrite from a few threads,
// checksumming them as they go (raw_io.h); rank 0 adds the checksum attributes; the file is
// reopened and every checksum recomputed from it while it is fsynced; then it is renamed
// (checkpoint_dir.h adds `latest`, keep-last-K and find_latest_good). Loading checks the format,
// the architecture (config field by field, missing/unexpected parameters) and the checksums of
// what it reads (parallel HDF5 reads: any HDF5 file of this layout loads, whoever wrote it).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/arena.h"
#include "model/config.h"
#include "checkpoint/checkpoint_format.h"
#include "nlohmann/json.hpp"

namespace vt {

class ProcessGrid;

// Where a save's time went (seconds on this rank). Wall-clock phases: `write` (layout, data and
// checksum attributes written), `verify` (reopened, re-read, every checksum recomputed, and the
// fsync beside it), `rename`; `total` (the whole save). Within them: `checksum` (the checksums of
// the data in memory, computed by the writing threads chunk by chunk; summed over the threads)
// and `fsync` (this rank's flush to disk, on a thread of its own during the verify). Filled when
// a caller passes one.
struct SaveTimings {
  double write = 0, verify = 0, rename = 0, total = 0;
  double release = 0;           // before the save: the page cache of older checkpoints dropped
  // Within write: everything before the data (the plan, the space check, rank 0's file layout);
  // this rank's data writes.
  double layout = 0, data = 0;
  double checksum = 0, fsync = 0;
  // "cache of older files dropped 0.04 s, write 0.17 s (layout 0.01 s, data 0.16 s, checksums
  // 0.11 s within it), verify ..." (the first part only when a directory save dropped some).
  std::string str() const;
};

// Collective over grid->world() (nullptr: this process alone). Writes `path` atomically (see
// above); `store` holds this rank's parameters, `extra` its optimizer states. Every parameter of
// the model of `cfg` and every named tensor must be held, as a whole, by the ranks together.
// `meta` is taken from world rank 0.
absl::Status save_checkpoint(const std::string& path, const ModelConfig& cfg,
                             const ParamStore& store, const CheckpointMeta& meta,
                             const std::vector<NamedTensor>& extra = {},
                             const ProcessGrid* grid = nullptr, SaveTimings* timings = nullptr);

// Collective. Checks format, version and architecture against `cfg`, fills this rank's shard of
// every parameter of `store` and of every `extra` tensor (any layout), verifies the checksum of
// every dataset the ranks read whole between them, and returns the training state.
absl::StatusOr<CheckpointMeta> load_checkpoint(const std::string& path, const ModelConfig& cfg,
                                               const ParamStore& store,
                                               const std::vector<NamedTensor>& extra = {},
                                               const ProcessGrid* grid = nullptr);

// Header reads (any process, no MPI): the config and the training state of a checkpoint.
absl::StatusOr<ModelConfig> read_checkpoint_config(const std::string& path);
absl::StatusOr<CheckpointMeta> read_checkpoint_meta(const std::string& path);

// Like load_checkpoint, without the architecture check against a config: names and global
// shapes must match (the message lists what differs).
absl::Status load_checkpoint_params(const std::string& path, const ParamStore& store,
                                    const ProcessGrid* grid = nullptr);
// Fills each extra tensor from its dataset (global shapes inferred as for saving from `store`).
absl::Status load_checkpoint_tensors(const std::string& path, const std::vector<NamedTensor>& extra,
                                     const ProcessGrid* grid = nullptr,
                                     const ParamStore* store = nullptr);

}  // namespace vt
