// DataLoader: batches equal an independent computation over the concatenated shards, DP slices
// concatenate to the dp=1 batch, saved states resume the same stream under another DP size (with
// and without per-epoch shard shuffling), and bad data / arguments / states give clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "data/loader.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "nlohmann/json.hpp"

namespace vt::data {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kVocab = 5000;

// A data dir whose train split has shards of the given sizes holding tokens 0, 1, 2, ... in
// stream order; returns the concatenated stream.
std::vector<int32_t> make_dir(const fs::path& d, const std::vector<int64_t>& sizes,
                              bool with_meta = true, const std::string& prefix = "train_") {
  fs::remove_all(d);
  fs::create_directories(d);
  std::vector<int32_t> all;
  nlohmann::json names = nlohmann::json::array();
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int32_t> toks(sizes[i]);
    for (auto& t : toks) t = static_cast<int32_t>(all.size() + (&t - toks.data()));
    all.insert(all.end(), toks.begin(), toks.end());
    const std::string name = prefix + std::to_string(100000 + i).substr(1) + ".bin";
    EXPECT_TRUE(write_shard((d / name).string(), toks, kVocab).ok());
    names.push_back(name);
  }
  if (with_meta) {
    nlohmann::json meta = {{"format", "vtrain-data"},
                           {"created_by", "vtrain prepare"},
                           {"tokenizer", {{"vocab_size", kVocab}}},
                           {"train", {{"tokens", all.size()}, {"shards", names}}},
                           {"val", {{"tokens", 0}, {"shards", nlohmann::json::array()}}}};
    std::ofstream(d / kMetaFile) << meta.dump();
  }
  return all;
}

fs::path tmp(const std::string& name) { return fs::path(::testing::TempDir()) / ("vt_loader_" + std::to_string(::getpid()) + "_" + name); }

struct Rows {
  std::vector<int32_t> in, tg;
};

Rows batch(DataLoader& dl, int64_t B, int64_t T, int rank, int dp) {
  auto b = dl.next_batch(B, T, rank, dp);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return {};
  EXPECT_EQ(b->inputs.dim(0), B / dp);
  EXPECT_EQ(b->inputs.dim(1), T);
  const int64_t n = b->inputs.numel();
  return {{b->inputs.i32(), b->inputs.i32() + n}, {b->targets.i32(), b->targets.i32() + n}};
}

// One global step with `dp` loaders (as dp processes would), concatenated.
Rows global_step(std::vector<DataLoader>& ranks, int64_t B, int64_t T) {
  Rows out;
  const int dp = static_cast<int>(ranks.size());
  for (int r = 0; r < dp; ++r) {
    Rows x = batch(ranks[r], B, T, r, dp);
    out.in.insert(out.in.end(), x.in.begin(), x.in.end());
    out.tg.insert(out.tg.end(), x.tg.begin(), x.tg.end());
  }
  for (int r = 1; r < dp; ++r) EXPECT_EQ(ranks[r].state(), ranks[0].state());
  return out;
}

std::vector<DataLoader> open_ranks(const fs::path& d, int dp, const LoaderOptions& o = {}) {
  std::vector<DataLoader> v;
  for (int r = 0; r < dp; ++r) {
    auto dl = DataLoader::open(d.string(), "train", o);
    EXPECT_TRUE(dl.ok()) << dl.status();
    v.push_back(std::move(*dl));
  }
  return v;
}

TEST(Loader, BatchesFollowTheStreamAndDpSlicesConcatenate) {
  const fs::path d = tmp("stream");
  const std::vector<int32_t> all = make_dir(d, {37, 0, 100, 11, 64});
  const int64_t N = static_cast<int64_t>(all.size());
  const int64_t B = 4, T = 7;
  for (int dp : {1, 2, 4}) {
    std::vector<DataLoader> ranks = open_ranks(d, dp);
    EXPECT_EQ(ranks[0].tokens_per_epoch(), N);
    for (int64_t step = 0; step < 30; ++step) {  // 30 * 28 tokens: several epochs
      Rows g = global_step(ranks, B, T);
      ASSERT_EQ(static_cast<int64_t>(g.in.size()), B * T);
      for (int64_t i = 0; i < B * T; ++i) {
        const int64_t r = i / T, t = i % T;
        const int64_t p = step * B * T + r * T + t;
        ASSERT_EQ(g.in[i], all[p % N]) << "dp " << dp << " step " << step << " i " << i;
        ASSERT_EQ(g.tg[i], all[(p + 1) % N]);
      }
    }
    EXPECT_EQ(ranks[0].state().epoch, 30 * B * T / N);
  }
}

TEST(Loader, ResumeUnderAnotherDpSize) {
  const fs::path d = tmp("resume");
  make_dir(d, {50, 23, 81});
  for (bool shuffle : {false, true}) {
    LoaderOptions o;
    o.shuffle_shards = shuffle;
    o.seed = 1234;
    // Reference: dp = 1 for 40 steps.
    std::vector<DataLoader> ref = open_ranks(d, 1, o);
    std::vector<Rows> expect;
    for (int s = 0; s < 40; ++s) expect.push_back(global_step(ref, 6, 5));
    // dp = 2 for 13 steps, save, resume under dp = 3, then dp = 6.
    std::vector<DataLoader> a = open_ranks(d, 2, o);
    for (int s = 0; s < 13; ++s) {
      Rows g = global_step(a, 6, 5);
      ASSERT_EQ(g.in, expect[s].in) << "shuffle " << shuffle << " step " << s;
      ASSERT_EQ(g.tg, expect[s].tg);
    }
    const std::string saved = a[0].state_json().dump();
    std::vector<DataLoader> b = open_ranks(d, 3);  // fresh options: the state carries shuffle+seed
    for (auto& dl : b) ASSERT_TRUE(dl.load_state_json(nlohmann::json::parse(saved)).ok());
    for (int s = 13; s < 27; ++s) {
      Rows g = global_step(b, 6, 5);
      ASSERT_EQ(g.in, expect[s].in) << "shuffle " << shuffle << " step " << s;
    }
    std::vector<DataLoader> c = open_ranks(d, 6);
    for (auto& dl : c) ASSERT_TRUE(dl.set_state(b[0].state()).ok());
    for (int s = 27; s < 40; ++s) {
      Rows g = global_step(c, 6, 5);
      ASSERT_EQ(g.in, expect[s].in) << "shuffle " << shuffle << " step " << s;
      ASSERT_EQ(g.tg, expect[s].tg);
    }
  }
}

TEST(Loader, ShuffleVisitsEveryShardOncePerEpoch) {
  const fs::path d = tmp("shuffle");
  const std::vector<int64_t> sizes = {10, 20, 30, 40, 50, 60};
  const std::vector<int32_t> all = make_dir(d, sizes);
  LoaderOptions o;
  o.shuffle_shards = true;
  o.seed = 99;
  auto dl = DataLoader::open(d.string(), "train", o);
  ASSERT_TRUE(dl.ok());
  std::set<std::vector<int32_t>> orders;
  for (int epoch = 0; epoch < 6; ++epoch) {
    std::vector<int32_t> firsts;  // first token of each shard in visiting order
    std::vector<int32_t> seen;
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(dl->state().epoch, epoch);
      Rows r = batch(*dl, 1, 1, 0, 1);
      seen.push_back(r.in[0]);
    }
    // Each epoch is a concatenation of whole shards: sorting gives back the full set.
    std::vector<int32_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, all);
    for (size_t i = 0; i < seen.size(); ++i) {
      if (i == 0 || seen[i] != seen[i - 1] + 1) firsts.push_back(seen[i]);
    }
    orders.insert(firsts);
  }
  EXPECT_GT(orders.size(), 1u) << "every epoch used the same shard order";
}

TEST(Loader, LlmcDirectoryWithoutMeta) {
  const fs::path d = tmp("llmc");
  const std::vector<int32_t> all = make_dir(d, {30, 30}, /*with_meta=*/false, "fineweb_train_");
  ASSERT_TRUE(write_shard((d / "fineweb_val_000000.bin").string(), std::vector<int32_t>{1, 2, 3}, kVocab).ok());
  auto no_vocab = DataLoader::open(d.string(), "train");
  ASSERT_FALSE(no_vocab.ok());
  EXPECT_NE(no_vocab.status().message().find("vocabulary"), std::string::npos);
  LoaderOptions o;
  o.vocab_size = kVocab;
  auto dl = DataLoader::open(d.string(), "train", o);
  ASSERT_TRUE(dl.ok()) << dl.status();
  EXPECT_EQ(dl->num_shards(), 2);
  auto val = DataLoader::open(d.string(), "val", o);
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(val->tokens_per_epoch(), 3);
}

TEST(Loader, TokenOutsideVocabularyNamesTheShard) {
  const fs::path d = tmp("oov");
  make_dir(d, {20, 20});
  ASSERT_TRUE(write_shard((d / "train_00001.bin").string(), std::vector<int32_t>(20, 7000), 10000).ok());
  auto dl = DataLoader::open(d.string(), "train");
  ASSERT_TRUE(dl.ok());
  ASSERT_TRUE(dl->next_batch(1, 10, 0, 1).ok());  // first shard is fine
  auto b = dl->next_batch(2, 10, 0, 1);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("train_00001.bin"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("7000"), std::string::npos) << b.status();
  EXPECT_EQ(dl->state().offset, 10);  // a failed read does not advance
}

TEST(Loader, ArgumentAndStateErrors) {
  const fs::path d = tmp("errors");
  make_dir(d, {40, 40});
  auto dl = DataLoader::open(d.string(), "train");
  ASSERT_TRUE(dl.ok());
  EXPECT_FALSE(dl->next_batch(6, 8, 0, 4).ok());  // 6 rows over 4 ranks
  EXPECT_FALSE(dl->next_batch(4, 8, 4, 4).ok());  // rank out of range
  EXPECT_FALSE(dl->next_batch(4, 0, 0, 1).ok());
  EXPECT_FALSE(dl->next_batch(0, 8, 0, 1).ok());
  EXPECT_EQ(dl->state(), LoaderState{});

  nlohmann::json st = dl->state_json();
  st["split"] = "val";
  EXPECT_FALSE(dl->load_state_json(st).ok());
  st = dl->state_json();
  st["num_shards"] = 3;
  auto s = dl->load_state_json(st);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("same data directory"), std::string::npos) << s;
  st = dl->state_json();
  st["offset"] = 40;
  EXPECT_FALSE(dl->load_state_json(st).ok());
  for (const char* field : {"epoch", "shard", "offset", "seed", "num_shards", "tokens_per_epoch"}) {
    for (const char* v : {"2.44444e+75", "0.5", "18446744073709551615"}) {
      if (std::string(field) == "seed" && std::string(v) == "18446744073709551615") continue;  // a valid seed
      st = dl->state_json();
      st[field] = nlohmann::json::parse(v);
      EXPECT_FALSE(dl->load_state_json(st).ok()) << field << " = " << v;
    }
  }
  st = dl->state_json();
  st["seed"] = -1;
  EXPECT_FALSE(dl->load_state_json(st).ok());
  st.erase("epoch");
  EXPECT_FALSE(dl->load_state_json(st).ok());
  EXPECT_FALSE(dl->set_state(LoaderState{.epoch = 0, .shard = 2}).ok());

  auto no_val = DataLoader::open(d.string(), "val");
  ASSERT_FALSE(no_val.ok());
  EXPECT_NE(no_val.status().message().find("--val-fraction"), std::string::npos);
  EXPECT_FALSE(DataLoader::open(tmp("nonexistent").string(), "train").ok());
  LoaderOptions wrong;
  wrong.vocab_size = 4096;
  EXPECT_FALSE(DataLoader::open(d.string(), "train", wrong).ok());
}

}  // namespace
}  // namespace vt::data
