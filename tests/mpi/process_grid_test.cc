// ProcessGrid under MPI: coordinates, axis groups, and the layout errors.
// vtrain-mpi-ranks: 1 4 8
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"

namespace vt {
namespace {

ModelConfig cfg() {
  ModelConfig c;
  c.n_layer = 4;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.vocab_size = 100;
  c.seq_len = 16;
  EXPECT_TRUE(c.finalize().ok());
  return c;
}

TEST(ProcessGrid, AxisGroupsHoldTheRightRanks) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size();
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      if (W % (tp * pp)) continue;
      auto shape = make_grid_shape(W, tp, pp, cfg());
      ASSERT_TRUE(shape.ok()) << shape.status();
      ProcessGrid g(&world, *shape);
      const GridCoords c = g.coords();
      EXPECT_EQ(grid_rank(*shape, c), world.rank());
      EXPECT_EQ(g.tp()->size(), tp);
      EXPECT_EQ(g.pp()->size(), pp);
      EXPECT_EQ(g.dp()->size(), W / (tp * pp));
      EXPECT_EQ(g.stage()->size(), W / pp);
      EXPECT_EQ(g.tp()->rank(), c.tp);
      EXPECT_EQ(g.dp()->rank(), c.dp);
      EXPECT_EQ(g.pp()->rank(), c.pp);
      // Sum of world ranks over each group equals the ranks the coordinates predict.
      auto group_sum = [&](Communicator* comm, auto member) {
        double v = world.rank();
        comm->all_reduce_sum(&v, 1);
        double want = 0;
        for (int r = 0; r < W; ++r)
          if (member(grid_coords(*shape, r))) want += r;
        EXPECT_EQ(v, want);
      };
      group_sum(g.tp(), [&](GridCoords o) { return o.dp == c.dp && o.pp == c.pp; });
      group_sum(g.dp(), [&](GridCoords o) { return o.tp == c.tp && o.pp == c.pp; });
      group_sum(g.pp(), [&](GridCoords o) { return o.tp == c.tp && o.dp == c.dp; });
      group_sum(g.stage(), [&](GridCoords o) { return o.pp == c.pp; });
    }
  }
}

TEST(ProcessGrid, LayoutErrorsNameTheProblem) {
  auto msg = [](int world, int tp, int pp) {
    auto s = make_grid_shape(world, tp, pp, cfg());
    return s.ok() ? std::string() : std::string(s.status().message());
  };
  EXPECT_NE(msg(6, 4, 1).find("does not divide the 6 ranks"), std::string::npos);
  EXPECT_NE(msg(8, 8, 1).find("does not divide the 4 attention heads"), std::string::npos);
  EXPECT_NE(msg(4, 4, 1).find("KV heads"), std::string::npos);
  EXPECT_NE(msg(8, 1, 8).find("more pipeline stages than"), std::string::npos);
  EXPECT_EQ(stage_layers(5, 2, 0), std::make_pair(0, 3));
  EXPECT_EQ(stage_layers(5, 2, 1), std::make_pair(3, 5));
  EXPECT_EQ(stage_layers(4, 4, 3), std::make_pair(3, 4));
}

}  // namespace
}  // namespace vt
