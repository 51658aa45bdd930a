// ProcessGrid under MPI: coordinates, axis groups, and the layout errors; the interleaved
// schedule's virtual stages and pass order (pure functions, checked on every rank count).
// vtrain-mpi-ranks: 1 4 8
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include <set>
#include <tuple>

#include "parallel/mpi_communicator.h"
#include "model/model_split.h"
#include "pipeline/pipeline.h"
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
      auto shape = make_grid_shape(W, tp, pp, model_split(cfg()));
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
    auto s = make_grid_shape(world, tp, pp, model_split(cfg()));
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

TEST(VirtualStages, MegatronAssignmentAndRefusals) {
  // 8 layers, pp 4, vpp 2: 8 virtual stages of one layer; rank 1 holds virtual stages 1 and 5.
  EXPECT_EQ(virtual_stage_layers(8, 4, 2, 1), (std::vector<std::pair<int, int>>{{1, 2}, {5, 6}}));
  EXPECT_EQ(virtual_stage_layers(8, 2, 2, 0), (std::vector<std::pair<int, int>>{{0, 2}, {4, 6}}));
  EXPECT_EQ(virtual_stage_layers(5, 2, 1, 1), (std::vector<std::pair<int, int>>{{3, 5}}));
  EXPECT_TRUE(check_virtual_stages(8, 2, 2, 4).ok());
  EXPECT_TRUE(check_virtual_stages(5, 1, 1, 3).ok());
  auto msg = [](int L, int pp, int vpp, int m) {
    return std::string(check_virtual_stages(L, pp, vpp, m).message());
  };
  EXPECT_NE(msg(8, 1, 2, 4).find("--vpp 2 needs pipeline parallelism"), std::string::npos);
  EXPECT_NE(msg(6, 2, 2, 4).find("--vpp 2 does not divide the layers per pipeline stage (6 layers "
                                 "over --pp 2 = 3 each)"),
            std::string::npos);
  EXPECT_NE(msg(5, 2, 2, 4).find("do not split evenly"), std::string::npos);
  EXPECT_NE(msg(8, 2, 2, 3).find("a step has 3 micro-batches"), std::string::npos);
  EXPECT_TRUE(check_virtual_stages(8, 2, 2, -1).ok());  // micro-batches not known yet
}

std::string order(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& o : ops)
    s += (o.forward ? "F" : "B") + std::to_string(o.chunk) + std::to_string(o.micro) + " ";
  return s;
}

TEST(InterleavedSchedule, MegatronOrderByHand) {
  // pp 2, vpp 2, 4 micro-batches. Forward k: chunk (k mod 4) / 2, micro-batch (k / 4) 2 + k mod 2;
  // backward k: the chunks reversed. Stage 0 warms up with (2-0-1) 2 + (2-1) 2 = 4 forwards,
  // stage 1 with 2.
  EXPECT_EQ(order(interleaved_1f1b(2, 2, 4, 0)),
            "F00 F01 F10 F11 F02 B10 F03 B11 F12 B00 F13 B01 B12 B13 B02 B03 ");
  EXPECT_EQ(order(interleaved_1f1b(2, 2, 4, 1)),
            "F00 F01 F10 B10 F11 B11 F02 B00 F03 B01 F12 B12 F13 B13 B02 B03 ");
  // vpp 1 is plain 1F1B: pp - stage - 1 warm-up forwards.
  EXPECT_EQ(order(interleaved_1f1b(3, 1, 3, 0)), "F00 F01 F02 B00 B01 B02 ");
  EXPECT_EQ(order(interleaved_1f1b(3, 1, 3, 2)), "F00 B00 F01 B01 F02 B02 ");
  // m = pp: every forward first.
  EXPECT_EQ(order(interleaved_1f1b(2, 2, 2, 1)), "F00 F01 F10 F11 B10 B11 B00 B01 ");
}

// Runs every rank's order with blocking receives and non-blocking sends: a pass may run once the
// pass that feeds it has run (the previous virtual stage's forward; the next one's backward, or
// its own forward on the last). True when every rank finishes. Micro-batches >= stop are left
// out, as a stop request leaves them out.
bool runs_to_the_end(int pp, int vpp, int M, int stop) {
  std::vector<std::vector<PipelineOp>> ops(pp);
  for (int r = 0; r < pp; ++r)
    for (const PipelineOp& o : interleaved_1f1b(pp, vpp, M, r))
      if (o.micro < stop) ops[r].push_back(o);
  std::set<std::tuple<bool, int, int>> done;  // (forward, virtual stage, micro-batch)
  std::vector<size_t> pos(pp, 0);
  const int last = pp * vpp - 1;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r)
      while (pos[r] < ops[r].size()) {
        const PipelineOp& o = ops[r][pos[r]];
        const int v = o.chunk * pp + r;
        const bool ready = o.forward ? (v == 0 || done.count({true, v - 1, o.micro}))
                                     : done.count({v == last, v == last ? v : v + 1, o.micro});
        if (!ready) break;
        done.insert({o.forward, v, o.micro});
        ++pos[r];
        moved = true;
      }
  }
  for (int r = 0; r < pp; ++r)
    if (pos[r] != ops[r].size()) return false;
  return true;
}

TEST(InterleavedSchedule, EveryPassRunsOnceAndNoRankWaitsForever) {
  for (int pp : {2, 3, 4})
    for (int vpp : {1, 2, 3})
      for (int M : {pp, 2 * pp, 3 * pp}) {
        for (int r = 0; r < pp; ++r) {
          std::set<std::tuple<bool, int, int>> seen;
          for (const PipelineOp& o : interleaved_1f1b(pp, vpp, M, r))
            EXPECT_TRUE(seen.insert({o.forward, o.chunk, o.micro}).second);
          EXPECT_EQ(seen.size(), static_cast<size_t>(2 * M * vpp));
        }
        for (int stop = 1; stop <= M; ++stop)
          EXPECT_TRUE(runs_to_the_end(pp, vpp, M, stop)) << pp << " " << vpp << " " << M << " " << stop;
      }
}

TEST(InterleavedSchedule, ReplayGivesMegatronsBubble) {
  // Forwards of f / vpp, backwards of b / vpp on every rank: the step is (M + (pp-1)/vpp)(f + b),
  // i.e. the bubble (pp - 1) / (vpp M) of the ideal M (f + b).
  const double f = 1.0, b = 2.0;
  for (int pp : {2, 4})
    for (int vpp : {1, 2, 3})
      for (int M : {pp, 2 * pp, 8}) {
        if (M % pp) continue;
        std::vector<std::vector<double>> t(pp);
        for (int r = 0; r < pp; ++r)
          for (const PipelineOp& o : interleaved_1f1b(pp, vpp, M, r))
            t[r].push_back((o.forward ? f : b) / vpp);
        EXPECT_NEAR(replay_step_seconds(pp, vpp, M, t), (M + (pp - 1.0) / vpp) * (f + b), 1e-9)
            << pp << " " << vpp << " " << M;
      }
  // A slow last stage (the loss end) holds the others up: pp 2, vpp 1, M 2, rank 1's passes
  // twice as long: F0 on rank 0 ends at 1, rank 1 runs F0 B0 F1 B1 from 1 to 1 + 2 (1 + 2 + 1 + 2)
  // = 13, rank 0's B1 ends at 13 + 2.
  std::vector<std::vector<double>> t = {{1, 1, 2, 2}, {2, 4, 2, 4}};
  EXPECT_NEAR(replay_step_seconds(2, 1, 2, t), 15.0, 1e-12);
}

}  // namespace
}  // namespace vt
