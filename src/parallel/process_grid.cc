// ProcessGrid: layout validation and the axis communicators.
#include "parallel/process_grid.h"

#include "parallel/hybrid_communicator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "parallel/mpi_communicator.h"

namespace vt {

absl::StatusOr<GridShape> make_grid_shape(int world, int tp, int pp, const ModelSplit& cfg) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (tp < 1 || pp < 1) return bad("--tp and --pp must be >= 1 (got tp=", tp, ", pp=", pp, ")");
  if (world % (tp * pp) != 0)
    return bad("--tp ", tp, " x --pp ", pp, " = ", tp * pp, " does not divide the ", world,
               " ranks of this job; the data-parallel size is world / (tp*pp)");
  if (cfg.n_head % tp != 0)
    return bad("--tp ", tp, " does not divide the ", cfg.n_head, " attention heads");
  if (cfg.n_kv_head % tp != 0)
    return bad("--tp ", tp, " does not divide the ", cfg.n_kv_head, " KV heads");
  if (cfg.mlp_hidden % tp != 0)
    return bad("--tp ", tp, " does not divide the MLP width ", cfg.mlp_hidden);
  if (cfg.vocab_padded % tp != 0)
    return bad("--tp ", tp, " does not divide the padded vocabulary ", cfg.vocab_padded);
  if (pp > cfg.n_layer)
    return bad("--pp ", pp, " is more pipeline stages than the model's ", cfg.n_layer, " layers");
  GridShape g;
  g.tp = tp;
  g.pp = pp;
  g.dp = world / (tp * pp);
  return g;
}

GridCoords grid_coords(const GridShape& g, int r) {
  GridCoords c;
  c.tp = r % g.tp;
  c.dp = (r / g.tp) % g.dp;
  c.pp = r / (g.tp * g.dp);
  return c;
}

int grid_rank(const GridShape& g, const GridCoords& c) {
  return c.tp + g.tp * (c.dp + g.dp * c.pp);
}

std::pair<int, int> stage_layers(int n_layer, int pp, int stage) {
  const int base = n_layer / pp, extra = n_layer % pp;
  const int begin = stage * base + std::min(stage, extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

std::vector<std::pair<int, int>> virtual_stage_layers(int n_layer, int pp, int vpp, int stage) {
  if (vpp == 1) return {stage_layers(n_layer, pp, stage)};
  VT_CHECK(pp > 1 && n_layer % (pp * vpp) == 0 && 0 <= stage && stage < pp);
  const int per = n_layer / (pp * vpp);
  std::vector<std::pair<int, int>> chunks;
  for (int c = 0; c < vpp; ++c) {
    const int v = c * pp + stage;  // the virtual stage of chunk c
    chunks.push_back({v * per, (v + 1) * per});
  }
  return chunks;
}

absl::Status check_virtual_stages(int n_layer, int pp, int vpp, int micro_batches) {
  if (vpp == 1) return absl::OkStatus();
  if (pp == 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "--vpp ", vpp, " needs pipeline parallelism: it splits each pipeline rank's layers into "
        "virtual stages; pass --pp 2 or more, or drop --vpp"));
  if (n_layer % pp != 0 || (n_layer / pp) % vpp != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--vpp ", vpp, " does not divide the layers per pipeline stage (", n_layer, " layers over --pp ",
        pp, n_layer % pp != 0 ? absl::StrCat(" do not split evenly") : absl::StrCat(" = ", n_layer / pp, " each"),
        "); the interleaved schedule needs --layers a multiple of pp x vpp = ", pp * vpp));
  if (micro_batches >= 0 && micro_batches % pp != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--vpp ", vpp, ": the interleaved schedule runs the micro-batches in groups of --pp ", pp,
        ", but a step has ", micro_batches,
        " micro-batches per data-parallel rank (--global-batch / (--micro-batch x seq-len x dp)); "
        "make it a multiple of ", pp, " or drop --vpp"));
  return absl::OkStatus();
}

ProcessGrid::ProcessGrid(Communicator* world, const GridShape& shape)
    : world_(world), shape_(shape) {
  VT_CHECK_MSG(world->size() == shape.world(), "grid " << shape.tp << "x" << shape.dp << "x"
                                                        << shape.pp << " vs world " << world->size());
  coords_ = grid_coords(shape, world->rank());
  if (world->size() == 1) {
    tp_ = dp_ = pp_ = stage_ = self_communicator();
    return;
  }
  auto* mpi = dynamic_cast<MpiCommunicator*>(world);
  VT_CHECK_MSG(mpi != nullptr, "a multi-rank grid needs an MPI world communicator");
  const GridCoords& c = coords_;
  auto make = [&](int color, int key, const char* name) {
    owned_.emplace_back(mpi->split(color, key, name));
    return owned_.back().get();
  };
  // Colors identify the fixed coordinates; keys order ranks along the free axis.
  tp_ = make(c.dp + shape.dp * c.pp, c.tp, "tensor-parallel");
  dp_ = make(c.tp + shape.tp * c.pp, c.dp, "data-parallel");
  pp_ = make(c.tp + shape.tp * c.dp, c.pp, "pipeline");
  stage_ = make(c.pp, c.tp + shape.tp * c.dp, "stage");
}

void ProcessGrid::use_device_communicators(const DeviceCommFactory& make_device) {
  // The same order on every rank (each construction is collective over its group).
  for (Communicator** g : {&tp_, &dp_, &pp_, &stage_}) {
    if ((*g)->size() == 1) continue;
    owned_.push_back(std::make_unique<HybridCommunicator>(*g, make_device(*g)));
    *g = owned_.back().get();
  }
}

ProcessGrid::~ProcessGrid() = default;

}  // namespace vt
