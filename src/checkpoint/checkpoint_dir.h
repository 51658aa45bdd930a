// A directory of checkpoints: `step_NNNNNNNN.h5` files plus a `latest` pointer file naming the
// newest complete one. Saving goes file first (written to .tmp, verified, renamed), then
// `latest` (tmp + rename), then pruning to the newest K, so a crash at any moment leaves the
// previous checkpoint loadable and `latest` naming a complete file. Leftover `.tmp` files are
// never read (and are removed by the next save).
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"

namespace vt {

// "step_00000500.h5".
std::string checkpoint_file_name(int64_t step);
// The step of a file name "step_NNNNNNNN.h5" (any number of digits), or -1.
int64_t checkpoint_step_of(const std::string& file_name);
// Steps of the complete checkpoints in `dir` (not .tmp), newest first.
std::vector<int64_t> list_checkpoint_steps(const std::string& dir);
// The file name `latest` points to, "" when there is no pointer.
std::string read_latest_pointer(const std::string& dir);

// Collective over grid->world() (nullptr: this process). Saves dir/step_NNNNNNNN.h5 with
// save_checkpoint, points `latest` at it, then (keep_last > 0) deletes the checkpoints older than
// it beyond the newest keep_last (this one included), and stale .tmp files. Checkpoints of later
// steps (another run's) are never deleted. Returns the new checkpoint's path.
absl::StatusOr<std::string> save_checkpoint_in_dir(const std::string& dir, int64_t step,
                                                   const ModelConfig& cfg, const ParamStore& store,
                                                   const CheckpointMeta& meta,
                                                   const std::vector<NamedTensor>& extra = {},
                                                   const ProcessGrid* grid = nullptr,
                                                   int keep_last = 0,
                                                   SaveTimings* timings = nullptr);

// Collective. The newest checkpoint in `dir` that passes verify_checkpoint (so a corrupt or
// truncated newest file falls back to the previous one; each one skipped is reported on stderr
// by rank 0); "" when `dir` holds no checkpoint; an error listing why each failed when none
// verifies. For `--resume auto`.
absl::StatusOr<std::string> find_latest_good(const std::string& dir,
                                             const ProcessGrid* grid = nullptr);

}  // namespace vt
