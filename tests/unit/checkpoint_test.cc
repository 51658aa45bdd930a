// Checkpoints in one process: round trip with optimizer states and training state, the
// layout-independent checksum, the raw data runs of a shard's box, atomic directory handling
// (.tmp ignored, truncated newest file, keep-last-K), corruption, foreign files, future versions,
// architecture mismatches, and files whose datasets are not contiguous (verified through HDF5).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/checksum.h"
#include "checkpoint/h5_file.h"
#include "checkpoint/raw_io.h"
#include "checkpoint_test_util.h"
#include "model/gpt.h"

namespace vt {
namespace {

namespace fs = std::filesystem;
using testing::ckpt_config;

// A scratch directory per test.
class checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("vtrain_ckpt_" + std::string(info->name()) + "_" +
                                        std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// A whole model (one process) filled with the global test values, with its states.
struct Model {
  explicit Model(const ModelConfig& c, uint64_t salt = 0) : cfg(c), gpt(c) {
    gpt.register_params(store);
    store.finalize();
    states = testing::make_states(store);
    testing::fill_store(store, &states, salt);
  }
  ModelConfig cfg;
  GPT gpt;
  ParamStore store;
  testing::StateSet states;
};

CheckpointMeta test_meta(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.tokens = step * 1000;
  m.loader_state = {{"epoch", 1}, {"shard", 2}, {"offset", step}};
  m.rng_state = {{"seed", 7}, {"counter", 99}};
  m.extra = {{"lr", 0.02}};
  return m;
}

std::string save_step(const std::string& dir, const Model& m, int64_t step, int keep_last = 0) {
  auto p = save_checkpoint_in_dir(dir, step, m.cfg, m.store, test_meta(step), m.states.named,
                                  nullptr, keep_last);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : "";
}

// Flips `n` bytes in the middle of a dataset's contiguous storage.
void flip_bytes(const std::string& file, const std::string& dataset, int n) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  const haddr_t off = H5Dget_offset(d);
  const hsize_t size = H5Dget_storage_size(d);
  H5Dclose(d);
  H5Fclose(f);
  ASSERT_NE(off, HADDR_UNDEF);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  for (int i = 0; i < n; ++i) {
    io.seekg(static_cast<std::streamoff>(off + size / 2 + i));
    char c = 0;
    io.get(c);
    io.seekp(static_cast<std::streamoff>(off + size / 2 + i));
    io.put(static_cast<char>(c ^ 0x5a));
  }
}

TEST(checkpoint_checksum, DoesNotDependOnHowTheTensorIsSplit) {
  const Shape g = {6, 10, 4};
  std::vector<float> all(shape_numel(g));
  for (size_t i = 0; i < all.size(); ++i) all[i] = testing::global_value("x", i);
  const uint64_t whole = ckpt::checksum_run(all.data(), 0, all.size());
  EXPECT_EQ(ckpt::checksum_box(all.data(), g, {0, 0, 0}, g), whole);
  for (int axis = 0; axis < 3; ++axis) {
    uint64_t sum = 0;
    for (int part = 0; part < 2; ++part) {
      Shape local = g;
      local[axis] = g[axis] / 2;
      ParamSplit split{axis, part * local[axis]};
      std::vector<float> shard(shape_numel(local));
      testing::fill_shard(shard.data(), "x", local, g, split);
      std::vector<int64_t> start(3, 0);
      start[axis] = split.offset;
      sum += ckpt::checksum_box(shard.data(), g, start, local);
    }
    EXPECT_EQ(sum, whole) << "axis " << axis;
  }
  all[17] = std::nextafter(all[17], 2.0f);
  EXPECT_NE(ckpt::checksum_run(all.data(), 0, all.size()), whole);
  std::swap(all[3], all[4]);  // position matters, not just the multiset of values
  all[17] = std::nextafter(all[17], -2.0f);
  EXPECT_NE(ckpt::checksum_run(all.data(), 0, all.size()), whole);
  EXPECT_EQ(*ckpt::parse_checksum_hex(ckpt::checksum_hex(whole)), whole);
}

// A shard's runs put every element at its global position, and whole rows make one run.
TEST(checkpoint_raw, BoxRunsPlaceEveryElementAtItsGlobalIndex) {
  const Shape g = {6, 10, 4};
  const int64_t base = 4096;
  for (int axis = 0; axis < 3; ++axis) {
    for (int part = 0; part < 2; ++part) {
      Shape local = g;
      local[axis] = g[axis] / 2;
      const ParamSplit split{axis, part * local[axis]};
      std::vector<float> shard(shape_numel(local));
      for (size_t k = 0; k < shard.size(); ++k) shard[k] = static_cast<float>(k);
      h5::Slab box{std::vector<int64_t>(3, 0), local};
      box.start[axis] = split.offset;
      std::vector<ckpt::RawRun> runs;
      ckpt::append_box_runs(runs, 7, base, shard.data(), g, box);
      std::vector<int> seen(shape_numel(g), 0);
      int64_t covered = 0;
      for (const ckpt::RawRun& r : runs) {
        EXPECT_EQ(r.dataset, 7);
        EXPECT_EQ(r.offset, base + 4 * r.first);
        for (int64_t k = 0; k < r.n; ++k) {
          const int64_t local_k = static_cast<int64_t>(r.data[k]);
          EXPECT_EQ(r.first + k, testing::global_index(local, g, split, local_k));
          ++seen[r.first + k];
        }
        covered += r.n;
      }
      EXPECT_EQ(covered, shape_numel(local));
      for (int v : seen) EXPECT_LE(v, 1);
      // Runs break only where the file or the memory does: a split of axis 0 is one run, of
      // axis 1 one run per index of axis 0, of axis 2 one per row.
      const size_t want = axis == 0 ? 1 : axis == 1 ? g[0] : g[0] * g[1];
      EXPECT_EQ(runs.size(), want) << "axis " << axis;
    }
  }
  std::vector<ckpt::RawRun> runs;
  const float x = 1;
  ckpt::append_box_runs(runs, 0, 100, &x, {}, h5::Slab{});  // a scalar
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].n, 1);
  EXPECT_EQ(runs[0].offset, 100);
}

TEST_F(checkpoint, RoundTripsParamsStatesAndTrainingState) {
  const ModelConfig cfg = ckpt_config(ValueMode::kResformerPlus);
  Model saved(cfg);
  const std::string p = save_step(dir_.string(), saved, 5);
  EXPECT_EQ(p, path("step_00000005.h5"));
  EXPECT_EQ(read_latest_pointer(dir_.string()), "step_00000005.h5");
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  Model loaded(cfg, /*salt=*/1);
  ASSERT_GT(testing::store_mismatches(loaded.store, &loaded.states), 0);
  auto meta = load_checkpoint(p, cfg, loaded.store, loaded.states.named);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(testing::store_mismatches(loaded.store, &loaded.states), 0);
  EXPECT_EQ(meta->step, 5);
  EXPECT_EQ(meta->tokens, 5000);
  EXPECT_EQ(meta->loader_state, test_meta(5).loader_state);
  EXPECT_EQ(meta->rng_state, test_meta(5).rng_state);
  EXPECT_EQ(meta->extra, test_meta(5).extra);
  EXPECT_EQ(meta->format_version, kCheckpointFormatVersion);
  EXPECT_EQ(meta->library_version, kVtrainLibraryVersion);
  EXPECT_EQ(meta->layout["tp"], 1);
  EXPECT_EQ(meta->layout["world"], 1);

  EXPECT_TRUE(verify_checkpoint(p).ok()) << verify_checkpoint(p);
  auto info = inspect_checkpoint(p);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->meta.step, 5);
  const std::string text = format_checkpoint_info(*info);
  EXPECT_NE(text.find("/model/wte  (128, 64)  checksum "), std::string::npos) << text;
  EXPECT_NE(text.find("/optim/value_plus.logits/exp_avg_sq"), std::string::npos) << text;
  EXPECT_NE(text.find("/optim/blocks.3.mlp.fc/momentum_buffer"), std::string::npos) << text;
  EXPECT_NE(text.find("pkmix64-sum"), std::string::npos) << text;

  // The older calls the trainer and CLI use.
  auto c = read_checkpoint_config(p);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(config_differences(*c, cfg).empty());
  Model again(cfg, 2);
  ASSERT_TRUE(load_checkpoint_params(p, again.store).ok());
  std::vector<NamedTensor> plain;  // {path, tensor}: whole tensors in one process
  for (const NamedTensor& t : again.states.named) plain.push_back({t.path, t.tensor});
  ASSERT_TRUE(load_checkpoint_tensors(p, plain).ok());
  EXPECT_EQ(testing::store_mismatches(again.store, &again.states), 0);
  EXPECT_EQ(read_checkpoint_meta(p)->tokens, 5000);

  // Every dataset is one contiguous block of the file (what the raw writer and verifier need).
  auto f = h5::File::open_read(p);
  ASSERT_TRUE(f.ok());
  const std::vector<std::string> names = *f->list_datasets();
  ASSERT_FALSE(names.empty());
  for (const std::string& n : names) EXPECT_GE(f->open_dataset(n)->contiguous_offset(), 0) << n;
}

TEST_F(checkpoint, LargeAttributesFit) {
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  Model m(cfg);
  CheckpointMeta meta = test_meta(1);
  meta.extra = {{"blob", std::string(200000, 'x')}};
  ASSERT_TRUE(save_checkpoint(path("big.h5"), cfg, m.store, meta).ok());
  EXPECT_EQ(read_checkpoint_meta(path("big.h5"))->extra, meta.extra);
}

TEST_F(checkpoint, TmpFilesAreIgnoredAndTruncatedNewestFallsBack) {
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  Model m(cfg);
  EXPECT_EQ(*find_latest_good(dir_.string()), "");  // empty directory: start fresh
  const std::string p10 = save_step(dir_.string(), m, 10);
  // A crash while writing step 20 leaves only its .tmp.
  fs::copy_file(p10, path("step_00000020.h5.tmp"));
  EXPECT_EQ(*find_latest_good(dir_.string()), p10);
  EXPECT_EQ(list_checkpoint_steps(dir_.string()), std::vector<int64_t>{10});

  const std::string p20 = save_step(dir_.string(), m, 20);
  EXPECT_FALSE(fs::exists(path("step_00000020.h5.tmp")));
  EXPECT_EQ(*find_latest_good(dir_.string()), p20);
  fs::resize_file(p20, fs::file_size(p20) / 2);
  const absl::Status v = verify_checkpoint(p20);
  EXPECT_EQ(v.code(), absl::StatusCode::kDataLoss) << v;
  EXPECT_NE(v.message().find("truncated"), std::string::npos) << v;
  EXPECT_EQ(*find_latest_good(dir_.string()), p10);
  Model into(cfg, 3);
  EXPECT_FALSE(load_checkpoint(p20, cfg, into.store).ok());

  // Nothing good at all: an error, not a silent fresh start.
  fs::resize_file(p10, 100);
  auto none = find_latest_good(dir_.string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("step_00000010.h5"), std::string::npos) << none.status();
}

TEST_F(checkpoint, KeepsTheLastK) {
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  Model m(cfg);
  for (int64_t s = 1; s <= 3; ++s) save_step(dir_.string(), m, s, /*keep_last=*/2);
  EXPECT_EQ(list_checkpoint_steps(dir_.string()), (std::vector<int64_t>{3, 2}));
  { std::ofstream(path("step_00000002.h5.tmp")) << "stale"; }
  save_step(dir_.string(), m, 4, 2);
  EXPECT_EQ(list_checkpoint_steps(dir_.string()), (std::vector<int64_t>{4, 3}));
  EXPECT_FALSE(fs::exists(path("step_00000002.h5.tmp")));
  EXPECT_EQ(read_latest_pointer(dir_.string()), "step_00000004.h5");
  // keep_last 0 keeps everything.
  save_step(dir_.string(), m, 5, 0);
  EXPECT_EQ(list_checkpoint_steps(dir_.string()), (std::vector<int64_t>{5, 4, 3}));
  // A later step (another run's) is never deleted; the one just written never is either.
  save_step(dir_.string(), m, 9, 0);
  save_step(dir_.string(), m, 6, 1);
  EXPECT_EQ(list_checkpoint_steps(dir_.string()), (std::vector<int64_t>{9, 6}));
  EXPECT_EQ(read_latest_pointer(dir_.string()), "step_00000006.h5");
}

TEST_F(checkpoint, CorruptionNamesTheDataset) {
  const ModelConfig cfg = ckpt_config(ValueMode::kResformerPlus);
  Model m(cfg);
  const std::string p = save_step(dir_.string(), m, 1);
  ASSERT_TRUE(verify_checkpoint(p).ok());
  flip_bytes(p, "/model/blocks.1.mlp.fc", 3);
  flip_bytes(p, "/optim/wte/exp_avg", 1);
  const absl::Status v = verify_checkpoint(p);
  EXPECT_EQ(v.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(v.message().find("/model/blocks.1.mlp.fc: checksum mismatch"), std::string::npos) << v;
  EXPECT_NE(v.message().find("/optim/wte/exp_avg: checksum mismatch"), std::string::npos) << v;
  EXPECT_EQ(v.message().find("/model/wte:"), std::string::npos) << v;

  Model into(cfg, 1);
  auto loaded = load_checkpoint(p, cfg, into.store, into.states.named);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("/model/blocks.1.mlp.fc"), std::string::npos)
      << loaded.status();
  EXPECT_FALSE(find_latest_good(dir_.string()).ok());  // the only checkpoint is corrupt
}

TEST_F(checkpoint, RefusesForeignFilesAndFutureVersions) {
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  Model m(cfg);
  auto msg = [&](const std::string& p) {
    absl::Status st = load_checkpoint(p, cfg, m.store).status();
    EXPECT_FALSE(st.ok());
    return std::string(st.message());
  };
  EXPECT_NE(msg(path("missing.h5")).find("no checkpoint file"), std::string::npos);
  { std::ofstream(path("text.h5")) << "just some text, not HDF5\n"; }
  EXPECT_NE(msg(path("text.h5")).find("is not an HDF5 file"), std::string::npos);
  {
    auto f = h5::File::create(path("other.h5"));
    ASSERT_TRUE(f.ok());
    const float x[2] = {1, 2};
    ASSERT_TRUE(f->write_f32("/data", {2}, x).ok());
  }
  EXPECT_NE(msg(path("other.h5")).find("is an HDF5 file but not a vtrain checkpoint"),
            std::string::npos);
  EXPECT_NE(verify_checkpoint(path("other.h5")).message().find("not a vtrain checkpoint"),
            std::string::npos);

  const std::string p = path("future.h5");
  ASSERT_TRUE(save_checkpoint(p, cfg, m.store, test_meta(1)).ok());
  {
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 2);
    H5Adelete(f, "format_version");
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format_version", type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, "99");
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(f);
  }
  const std::string future = msg(p);
  EXPECT_NE(future.find("format version 99, newer than this build"), std::string::npos) << future;
}

TEST_F(checkpoint, ArchitectureMismatchListsFieldsAndParameters) {
  const ModelConfig six = ckpt_config(ValueMode::kResformerPlus, "default", false, 6);
  Model m6(six);
  ASSERT_TRUE(save_checkpoint(path("six.h5"), six, m6.store, test_meta(1)).ok());
  const ModelConfig four = ckpt_config(ValueMode::kResformerPlus, "default", false, 4);
  Model m4(four);
  absl::Status st = load_checkpoint(path("six.h5"), four, m4.store).status();
  ASSERT_FALSE(st.ok());
  const std::string s(st.message());
  EXPECT_NE(s.find("n_layer: checkpoint 6, model 4"), std::string::npos) << s;
  EXPECT_NE(s.find("in the checkpoint but not in the model"), std::string::npos) << s;
  EXPECT_NE(s.find("blocks.5.attn.wq"), std::string::npos) << s;
  EXPECT_NE(s.find("target_layers: checkpoint [1,2,3,4,5], model [1,2,3]"), std::string::npos) << s;
  const ModelConfig base = ckpt_config(ValueMode::kBaseline, "default", false, 6);
  Model mb(base);
  std::string s2(load_checkpoint(path("six.h5"), base, mb.store).status().message());
  EXPECT_NE(s2.find("value_mode: checkpoint \"resformer-plus\", model \"baseline\""),
            std::string::npos) << s2;
  EXPECT_NE(s2.find("value_plus.logits"), std::string::npos) << s2;
}

// A resformer-plus checkpoint from before --plus-init / --plus-scale reads as blagpt / fixed
// (model_config_test): resuming it under the new defaults (paper, learnable scale) is refused,
// naming the fields and the missing scale; with --plus-init blagpt --plus-scale fixed it loads.
TEST_F(checkpoint, OldResformerPlusResumesOnlyAsItWas) {
  ModelConfig old = ckpt_config(ValueMode::kResformerPlus);
  old.plus_init = "blagpt";
  old.plus_scale = "fixed";
  ASSERT_TRUE(old.finalize().ok());
  Model mo(old);
  ASSERT_TRUE(save_checkpoint(path("old.h5"), old, mo.store, test_meta(1)).ok());
  const ModelConfig now = ckpt_config(ValueMode::kResformerPlus);
  ASSERT_EQ(now.plus_init, "paper");
  Model mn(now);
  const std::string s(load_checkpoint(path("old.h5"), now, mn.store).status().message());
  EXPECT_NE(s.find("plus_init: checkpoint \"blagpt\", model \"paper\""), std::string::npos) << s;
  EXPECT_NE(s.find("missing from the checkpoint (1): value_plus.scale"), std::string::npos) << s;
  Model again(old, /*salt=*/1);
  EXPECT_TRUE(load_checkpoint(path("old.h5"), old, again.store).ok());
}

TEST_F(checkpoint, SaveRefusesAnIncompleteModel) {
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  ParamStore partial;  // the first pipeline stage only: no lm_head
  GPT first(cfg, ModelParallel{nullptr, 0, 2});
  first.register_params(partial);
  partial.finalize();
  absl::Status st = save_checkpoint(path("partial.h5"), cfg, partial, test_meta(1));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/model/lm_head (0 of "), std::string::npos) << st;
  EXPECT_FALSE(fs::exists(path("partial.h5")));
  EXPECT_FALSE(fs::exists(path("partial.h5.tmp")));
}

// A checkpoint whose datasets are chunked and compressed (as another HDF5 writer may store them)
// is verified and loaded through HDF5's reads instead of the raw ones; a changed value is found.
TEST_F(checkpoint, VerifiesAndLoadsChunkedDatasets) {
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  Model m(cfg);
  const std::string p = save_step(dir_.string(), m, 2);
  auto rewrite = [&](const std::string& out, bool corrupt) {
    auto src = h5::File::open_read(p);
    ASSERT_TRUE(src.ok());
    {
      auto dst = h5::File::create(out, MPI_COMM_NULL, /*dense_attributes=*/true);
      ASSERT_TRUE(dst.ok());
      for (const std::string& a : src->attr_names()) {
        auto s = src->get_attr(a);
        ASSERT_TRUE(s.ok() ? dst->set_attr(a, *s).ok() : dst->set_attr_i64(a, *src->get_attr_i64(a)).ok()) << a;
      }
      bool corrupted = false;
      const std::vector<std::string> names = *src->list_datasets();
      for (const std::string& n : names) {
        std::vector<float> v = *src->read_f32(n);
        Shape shape = *src->shape_of(n);
        if (corrupt && !corrupted && v.size() > 100) {
          v[v.size() / 2] += 1.0f;
          corrupted = true;
        }
        ASSERT_TRUE(dst->write_f32(n, shape, v.data()).ok());  // parents
        ASSERT_GE(H5Ldelete(dst->id(), n.c_str(), H5P_DEFAULT), 0);
        std::vector<hsize_t> dims(shape.begin(), shape.end()), chunk = dims;
        if (!chunk.empty()) chunk[0] = std::max<hsize_t>(1, chunk[0] / 3);
        hid_t space = dims.empty() ? H5Screate(H5S_SCALAR)
                                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (!dims.empty()) {
          H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
          H5Pset_deflate(dcpl, 1);
        }
        hid_t d = H5Dcreate2(dst->id(), n.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ASSERT_GE(d, 0) << n;
        ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
        H5Dclose(d);
        H5Pclose(dcpl);
        H5Sclose(space);
        auto ds = dst->open_dataset(n);
        ASSERT_TRUE(ds->set_attr("checksum", *src->open_dataset(n)->get_attr("checksum")).ok());
        if (!dims.empty()) {
          EXPECT_EQ(ds->contiguous_offset(), -1) << n;
        }
      }
      ASSERT_TRUE(dst->close().ok());
    }
  };
  rewrite(path("chunked.h5"), false);
  EXPECT_TRUE(verify_checkpoint(path("chunked.h5")).ok()) << verify_checkpoint(path("chunked.h5"));
  Model into(cfg, 5);
  ASSERT_TRUE(load_checkpoint(path("chunked.h5"), cfg, into.store, into.states.named).ok());
  EXPECT_EQ(testing::store_mismatches(into.store, &into.states), 0);
  rewrite(path("changed.h5"), true);
  const absl::Status v = verify_checkpoint(path("changed.h5"));
  EXPECT_EQ(v.code(), absl::StatusCode::kDataLoss) << v;
  EXPECT_NE(v.message().find("checksum mismatch"), std::string::npos) << v;
}

TEST_F(checkpoint, ReadsFormatOne) {
  // The single-process writer's layout: same datasets, a "meta" JSON attribute, no checksums.
  const ModelConfig cfg = ckpt_config(ValueMode::kBaseline);
  Model m(cfg);
  {
    auto f = h5::File::create(path("v1.h5"));
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->set_attr("format", "vtrain-checkpoint").ok());
    ASSERT_TRUE(f->set_attr("format_version", "1").ok());
    ASSERT_TRUE(f->set_attr("config", cfg.to_json().dump()).ok());
    ASSERT_TRUE(f->set_attr("meta", R"({"step":3,"tokens":30,"loader_state":null,"extra":null})").ok());
    for (int i = 0; i < m.store.size(); ++i)
      ASSERT_TRUE(f->write_f32("/model/" + m.store.info(i).name, m.store.info(i).global_shape,
                               m.store.param(i).f32()).ok());
  }
  Model into(cfg, 4);
  auto meta = load_checkpoint(path("v1.h5"), cfg, into.store);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 3);
  EXPECT_EQ(testing::store_mismatches(into.store, nullptr), 0);
  EXPECT_TRUE(verify_checkpoint(path("v1.h5")).ok());
}

}  // namespace
}  // namespace vt
