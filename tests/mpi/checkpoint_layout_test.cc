// Parallel checkpoints across layouts: save on every (tp, pp) the world allows (dp the rest),
// load on every other one and on a single process, and check each rank's shards of parameters
// and optimizer states against the global tensors exactly; plus collective verification,
// corruption found by a parallel load, and errors that every rank reports alike (no hang).
// vtrain-mpi-ranks: 1 2 4
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "../unit/checkpoint_test_util.h"
#include "model/model_split.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_verify.h"
#include "model/gpt.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"

namespace vt {
namespace {

namespace fs = std::filesystem;
using testing::ckpt_config;

// A scratch directory shared by every rank (rank 0 names and creates it).
std::string shared_dir(MpiCommunicator& world, const std::string& tag) {
  std::string name = (fs::temp_directory_path() / ("vtrain_ckpt_mpi_" + tag + "_" +
                                                   std::to_string(::getpid())))
                         .string();
  int n = static_cast<int>(name.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, world.comm());
  name.resize(n);
  MPI_Bcast(name.data(), n, MPI_CHAR, 0, world.comm());
  if (world.rank() == 0) {
    fs::remove_all(name);
    fs::create_directories(name);
  }
  world.barrier();
  return name;
}

// This rank's stage of the model on a grid, filled with the global test values (`salt`).
struct Local {
  Local(const ModelConfig& cfg, ProcessGrid& grid, uint64_t salt) {
    const auto [begin, end] = stage_layers(cfg.n_layer, grid.shape().pp, grid.coords().pp);
    gpt = std::make_unique<GPT>(cfg, ModelParallel{grid.tp(), begin, end});
    gpt->register_params(store);
    store.finalize();
    states = testing::make_states(store);
    testing::fill_store(store, &states, salt);
  }
  std::unique_ptr<GPT> gpt;
  ParamStore store;
  testing::StateSet states;
};

std::vector<std::pair<int, int>> layouts(int world, const ModelConfig& cfg) {
  std::vector<std::pair<int, int>> out;
  for (int tp : {1, 2})
    for (int pp : {1, 2})
      if (world % (tp * pp) == 0 && make_grid_shape(world, tp, pp, model_split(cfg)).ok()) out.push_back({tp, pp});
  return out;
}

struct Case {
  const char* name;
  ModelConfig cfg;
};

std::vector<Case> cases() {
  return {{"resformer-plus", ckpt_config(ValueMode::kResformerPlus)},  // value_plus.logits on every stage
          {"bov-shared", ckpt_config(ValueMode::kBov, "all", /*shared_table=*/true)},
          {"value-embed", ckpt_config(ValueMode::kValueEmbed)}};  // gate_w split by columns
}

int64_t sum_all(MpiCommunicator& world, int64_t v) {
  double d = static_cast<double>(v);
  world.all_reduce_sum(&d, 1);
  return static_cast<int64_t>(d);
}

TEST(checkpoint_layouts, SaveOnOneLayoutLoadOnAnother) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string dir = shared_dir(world, "layouts");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    for (const auto& [stp, spp] : layouts(world.size(), c.cfg)) {
      const std::string path = dir + "/" + c.name + "_tp" + std::to_string(stp) + "_pp" +
                               std::to_string(spp) + ".h5";
      {
        ProcessGrid grid(&world, *make_grid_shape(world.size(), stp, spp, model_split(c.cfg)));
        Local saved(c.cfg, grid, /*salt=*/0);
        CheckpointMeta meta;
        meta.step = 42;
        meta.tokens = 4200;
        meta.loader_state = {{"offset", 7}};
        ASSERT_TRUE(save_checkpoint(path, c.cfg, saved.store, meta, saved.states.named, &grid).ok());
        const absl::Status v = verify_checkpoint(path, &grid);
        ASSERT_TRUE(v.ok()) << v;
      }
      for (const auto& [ltp, lpp] : layouts(world.size(), c.cfg)) {
        SCOPED_TRACE("saved tp" + std::to_string(stp) + " pp" + std::to_string(spp) +
                     ", loaded tp" + std::to_string(ltp) + " pp" + std::to_string(lpp));
        ProcessGrid grid(&world, *make_grid_shape(world.size(), ltp, lpp, model_split(c.cfg)));
        Local into(c.cfg, grid, /*salt=*/1);
        auto meta = load_checkpoint(path, c.cfg, into.store, into.states.named, &grid);
        ASSERT_TRUE(meta.ok()) << meta.status();
        EXPECT_EQ(meta->step, 42);
        EXPECT_EQ(meta->tokens, 4200);
        EXPECT_EQ(meta->layout["tp"], stp);
        EXPECT_EQ(meta->layout["pp"], spp);
        EXPECT_EQ(meta->layout["world"], world.size());
        EXPECT_EQ(sum_all(world, testing::store_mismatches(into.store, &into.states)), 0);
      }
      // One process alone (no grid) loads the whole model.
      if (world.rank() == 0) {
        ParamStore whole;
        GPT gpt(c.cfg);
        gpt.register_params(whole);
        whole.finalize();
        testing::StateSet states = testing::make_states(whole);
        auto meta = load_checkpoint(path, c.cfg, whole, states.named);
        ASSERT_TRUE(meta.ok()) << meta.status();
        EXPECT_EQ(testing::store_mismatches(whole, &states), 0);
        EXPECT_TRUE(verify_checkpoint(path).ok());
      }
      world.barrier();
    }
  }
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST(checkpoint_layouts, DirectoryAndFindLatestGoodAcrossRanks) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string dir = shared_dir(world, "dir");
  const ModelConfig cfg = ckpt_config(ValueMode::kResformerPlus);
  const auto all = layouts(world.size(), cfg);
  const auto [tp, pp] = all.back();
  ProcessGrid grid(&world, *make_grid_shape(world.size(), tp, pp, model_split(cfg)));
  Local m(cfg, grid, 0);
  for (int64_t step : {10, 20, 30}) {
    auto p = save_checkpoint_in_dir(dir, step, cfg, m.store, CheckpointMeta{step, step}, m.states.named,
                                    &grid, /*keep_last=*/2);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  EXPECT_EQ(list_checkpoint_steps(dir), (std::vector<int64_t>{30, 20}));
  EXPECT_EQ(read_latest_pointer(dir), "step_00000030.h5");
  // Corrupt the newest: rank 0 overwrites a few bytes inside /model/wte's data.
  const std::string newest = dir + "/step_00000030.h5";
  if (world.rank() == 0) {
    hid_t f = H5Fopen(newest.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/model/wte", H5P_DEFAULT);
    const haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    std::fstream io(newest, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(off + 100));
    io.write("\x7f\x7f\x7f\x7f", 4);
  }
  world.barrier();
  auto good = find_latest_good(dir, &grid);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, dir + "/step_00000020.h5");
  Local into(cfg, grid, 1);
  auto bad = load_checkpoint(newest, cfg, into.store, into.states.named, &grid);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checksum mismatch in /model/wte"), std::string::npos)
      << bad.status();
  auto meta = load_checkpoint(*good, cfg, into.store, into.states.named, &grid);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 20);
  EXPECT_EQ(sum_all(world, testing::store_mismatches(into.store, &into.states)), 0);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST(checkpoint_layouts, ErrorsAreTheSameOnEveryRank) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string dir = shared_dir(world, "errors");
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  const int tp = world.size() % 2 == 0 ? 2 : 1;
  ProcessGrid grid(&world, *make_grid_shape(world.size(), tp, 1, model_split(cfg)));
  Local m(cfg, grid, 0);
  // Only rank 0 passes a state of wte (rows split over tp): with tp 2 half of it is missing.
  std::vector<NamedTensor> extra;
  if (world.rank() == 0) extra.push_back(m.states.named[1]);
  absl::Status st = save_checkpoint(dir + "/x.h5", cfg, m.store, {}, extra, &grid);
  if (tp == 2) {
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("do not hold all of " + m.states.named[1].path), std::string::npos) << st;
    EXPECT_FALSE(fs::exists(dir + "/x.h5.tmp"));
  } else {
    EXPECT_TRUE(st.ok()) << st;
  }
  // Another architecture: every rank refuses with the same message.
  const ModelConfig other = ckpt_config(ValueMode::kBaseline, "default", false, 2);
  ASSERT_TRUE(save_checkpoint(dir + "/y.h5", cfg, m.store, {}, {}, &grid).ok());
  ProcessGrid g2(&world, *make_grid_shape(world.size(), tp, 1, model_split(other)));
  Local small(other, g2, 0);
  absl::Status arch = load_checkpoint(dir + "/y.h5", other, small.store, {}, &g2).status();
  ASSERT_FALSE(arch.ok());
  EXPECT_NE(arch.message().find("n_layer: checkpoint 4, model 2"), std::string::npos) << arch;
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace vt
