// Reading a checkpoint's header and checking a whole file: open_checkpoint (exists, is HDF5, is
// a vtrain checkpoint of a format this build reads, config parses), verify_checkpoint (for
// `vtrain ckpt verify`: the structure against the config and every dataset's checksum
// recomputed from the file, split over the ranks) and inspect_checkpoint (for `vtrain ckpt
// inspect`: attributes, datasets, shapes, checksums).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/ckpt_comm.h"
#include "checkpoint/h5_file.h"

namespace vt {

// Collective over grid->world() (nullptr: this process). OK, or an error naming every problem:
// each dataset whose checksum does not match, missing or unexpected parameters, a truncated or
// foreign file, a future format version, parameters whose shapes differ from what the config
// implies, a partial set of optimizer states (a resume needs all), a dataset that declares more
// data than the file holds. `summary` (when given) says what was checked.
absl::Status verify_checkpoint(const std::string& path, const ProcessGrid* grid = nullptr,
                               std::string* summary = nullptr);

struct CheckpointDatasetInfo {
  std::string path;
  Shape shape;
  std::string checksum;  // "" when absent (format 1)
};
struct CheckpointInfo {
  std::string path;
  int format_version = 0;
  ModelConfig config;
  CheckpointMeta meta;
  std::vector<std::pair<std::string, std::string>> attributes;  // every root attribute, as text
  std::vector<CheckpointDatasetInfo> datasets;
};
// Header and dataset listing (no data is read).
absl::StatusOr<CheckpointInfo> inspect_checkpoint(const std::string& path);
// Human-readable form of `info` (what `vtrain ckpt inspect` prints).
std::string format_checkpoint_info(const CheckpointInfo& info);

namespace ckpt {

struct Opened {
  h5::File file;
  int format_version = 0;
  ModelConfig config;
};
// Opens (collectively when comm has MPI) and checks the header; errors say what the file is.
absl::StatusOr<Opened> open_checkpoint(const std::string& path, const CkptComm& comm);
absl::StatusOr<CheckpointMeta> read_meta(const h5::File& f, int format_version);
// Recomputes every dataset's checksum from the file (split over the ranks; contiguous datasets
// read raw in threads, raw_io.h, others through HDF5 by rows) and compares it
// with its attribute; also checks /model against the config's parameter list.
// With `states`, also the optimizer states a resume reads (all or none); a save's own check of
// the file it wrote passes false (it writes whatever states its caller gives).
absl::Status verify_file(const CkptComm& comm, const Opened& ck, const std::string& path,
                         std::string* summary = nullptr, bool states = true);

}  // namespace ckpt
}  // namespace vt
