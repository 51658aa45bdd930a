// Which rank writes or reads which box of which dataset. Each rank describes the tensors it
// holds (pieces: a dataset path, the global shape, the box of the global tensor it holds); the
// descriptions are exchanged so every rank derives the same ordered dataset list (HDF5 dataset
// creation and collective transfers need every rank to walk the same list), and the owner of
// each distinct box.
//
// Replica rule: among the ranks holding an identical box of a dataset, the lowest world rank is
// its owner: it writes it on save and contributes it to checksums. With the grid's rank order
// (tp fastest, then dp, then pp) that is dp 0 for every shard, additionally tp 0 for
// TP-replicated tensors (scalars), and the lowest pipeline stage for tensors held by several
// stages (value_plus.logits, the shared value.table). Distinct boxes of one dataset must not
// overlap; the dataset is `covered` when they tile the whole tensor.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/ckpt_comm.h"
#include "checkpoint/h5_file.h"
#include "core/arena.h"

namespace vt::ckpt {

// One tensor this rank holds.
struct Piece {
  std::string path;  // dataset path
  float* data = nullptr;
  Shape global;
  h5::Slab box;  // where the (row-major, contiguous) local tensor sits in the global one
};

// The box of a local tensor with `split` inside `global`; an error (naming `path`) when the
// local shape does not fit.
absl::StatusOr<h5::Slab> split_box(const std::string& path, const Shape& local, const Shape& global,
                                   const ParamSplit& split);

// This rank's pieces: every parameter of `store` (when `params`) at /model/<name>, then every
// named tensor. A named tensor without a global shape under /optim/<param>/<kind> takes the
// parameter's global shape and split from `store`; otherwise it is whole (replicated).
absl::StatusOr<std::vector<Piece>> local_pieces(const ParamStore* store, bool params,
                                                const std::vector<NamedTensor>& extra);

struct DatasetPlan {
  std::string path;
  Shape global;
  int piece = -1;        // this rank's piece of it (index into the pieces), -1 when none
  bool owner = false;    // this rank owns its piece (see the replica rule)
  bool covered = false;  // the ranks' distinct boxes tile the whole tensor
  int64_t held = 0;      // elements held by the distinct boxes
};

// Collective: exchanges the pieces and returns the same ordered list on every rank: `leading`
// first (in its order, held or not), then every other held path sorted. Errors (identical on all
// ranks): global shapes that disagree, overlapping distinct boxes.
absl::StatusOr<std::vector<DatasetPlan>> plan_datasets(
    const CkptComm& comm, const std::vector<Piece>& pieces,
    const std::vector<std::pair<std::string, Shape>>& leading);

}  // namespace vt::ckpt
