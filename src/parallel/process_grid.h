// ProcessGrid: the dp x tp x pp layout of the job's ranks (docs/design.md "Core ideas"): tp varies
// fastest (TP neighbours share a node), then dp, then pp (outermost). It validates the layout
// against the world size and the model, and owns one communicator per axis plus the `stage` group
// (all tp x dp ranks of one pipeline stage) used by the distributed optimizer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/communicator.h"

namespace vt {

struct GridShape {
  int tp = 1, dp = 1, pp = 1;
  int world() const { return tp * dp * pp; }
};

struct GridCoords {
  int tp = 0, dp = 0, pp = 0;
};

// The model's sizes a layout must split (model/model_split.h makes one from a ModelConfig).
struct ModelSplit {
  int64_t n_head = 1, n_kv_head = 1, mlp_hidden = 1, vocab_padded = 1, n_layer = 1;
};

// Checks that tp * pp divides the world and that the model splits: heads, KV heads, MLP width and
// padded vocabulary by tp, layers by pp (at least one layer per stage).
absl::StatusOr<GridShape> make_grid_shape(int world_size, int tp, int pp, const ModelSplit& cfg);
GridCoords grid_coords(const GridShape& g, int world_rank);
int grid_rank(const GridShape& g, const GridCoords& c);
// Contiguous layers [begin, end) of pipeline stage `stage`, as even as possible (earlier stages
// take the remainder).
std::pair<int, int> stage_layers(int n_layer, int pp, int stage);
// The interleaved schedule's layout (Megatron-LM's): the model is cut into pp * vpp virtual
// stages of n_layer / (pp * vpp) layers; rank `stage` holds virtual stages stage, stage + pp,
// stage + 2 pp, ... as its vpp model chunks. Returns their layer ranges in increasing order
// (vpp = 1: the one range of stage_layers).
std::vector<std::pair<int, int>> virtual_stage_layers(int n_layer, int pp, int vpp, int stage);
// The interleaved schedule's requirements, each refused naming its option: vpp > 1 needs
// pp > 1, vpp dividing the layers per stage (n_layer / pp, pp dividing n_layer), and a number
// of micro-batches per step that is a multiple of pp.
absl::Status check_virtual_stages(int n_layer, int pp, int vpp, int micro_batches);

class ProcessGrid {
 public:
  // Splits `world` (which must outlive the grid) into the axis groups.
  ProcessGrid(Communicator* world, const GridShape& shape);
  ~ProcessGrid();

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  Communicator* world() const { return world_; }
  Communicator* tp() const { return tp_; }
  Communicator* dp() const { return dp_; }
  Communicator* pp() const { return pp_; }
  Communicator* stage() const { return stage_; }
  bool is_first_stage() const { return coords_.pp == 0; }
  // Wraps every group of more than one rank (tp, dp, pp, stage) in a HybridCommunicator whose
  // device side is make_device(group): e.g. an NCCL communicator built over the group's MPI
  // communicator. Host-memory calls keep going through MPI. Collective over the world.
  using DeviceCommFactory = std::function<std::unique_ptr<Communicator>(Communicator* group)>;
  void use_device_communicators(const DeviceCommFactory& make_device);
  bool is_last_stage() const { return coords_.pp == shape_.pp - 1; }

 private:
  Communicator* world_;
  GridShape shape_;
  GridCoords coords_;
  Communicator *tp_ = nullptr, *dp_ = nullptr, *pp_ = nullptr, *stage_ = nullptr;
  std::vector<std::unique_ptr<Communicator>> owned_;
};

}  // namespace vt
