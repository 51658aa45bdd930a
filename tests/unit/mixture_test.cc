// data/mixture: --data / --data-stage parsing and its refusals, the blend's proportions, rows the
// same on any data-parallel split and micro-batch size, stages switching at their boundary, and a
// resume on another layout with other weights that reads every source on from where it stopped
// (each row's first token says which source and which position it came from: nothing read twice,
// nothing skipped).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "data/mixture.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/tokenizer_files.h"

namespace vt::data {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kVocab = 60000;
constexpr int64_t kBase = 10000;  // source k's stream holds k * kBase + 0, 1, 2, ...
constexpr int64_t kT = 8;

fs::path tmp(const std::string& name) {
  return fs::path(::testing::TempDir()) / ("vt_mixture_" + std::to_string(::getpid()) + "_" + name);
}

// A data directory whose train split is one shard of `n` tokens base, base + 1, ...
std::string make_source(const std::string& name, int64_t base, int64_t n,
                        const std::string& tokenizer = "{\"same\": 1}") {
  const fs::path d = tmp(name);
  fs::remove_all(d);
  fs::create_directories(d);
  std::vector<int32_t> toks(n);
  for (int64_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>(base + i);
  EXPECT_TRUE(write_shard((d / "train_0000.bin").string(), toks, kVocab).ok());
  const nlohmann::json meta = {{"format", "vtrain-data"},
                               {"created_by", "vtrain prepare"},
                               {"tokenizer", {{"vocab_size", kVocab}}},
                               {"train", {{"tokens", n}, {"shards", {"train_0000.bin"}}}},
                               {"val", {{"tokens", 0}, {"shards", nlohmann::json::array()}}}};
  std::ofstream(d / kMetaFile) << meta.dump();
  std::ofstream(d / kTokenizerFile) << tokenizer;
  return d.string();
}

struct Sources {
  std::string a = make_source("a", 0 * kBase, 4000);
  std::string b = make_source("b", 1 * kBase, 4000);
  std::string c = make_source("c", 2 * kBase, 4000);
  std::string spec(double wa, double wb, double wc) const {
    return "a=" + a + ":" + std::to_string(wa) + ",b=" + b + ":" + std::to_string(wb) + ",c=" + c +
           ":" + std::to_string(wc);
  }
};

MixtureLoader open(const std::string& data, const std::vector<std::string>& stages = {}) {
  auto spec = parse_data_spec(data, stages);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto m = MixtureLoader::open(*spec, "train", {});
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

// (source, position in its stream) of every row of `calls` batches of `rows` global rows, read
// as dp ranks would (each rank its own loader, as on a real run) and put back in global order.
std::vector<std::pair<int, int64_t>> read_rows(std::vector<MixtureLoader*> ranks, int64_t rows,
                                               int calls) {
  const int dp = static_cast<int>(ranks.size());
  std::vector<std::pair<int, int64_t>> out;
  for (int c = 0; c < calls; ++c) {
    for (int r = 0; r < dp; ++r) {
      std::vector<int32_t> in(rows / dp * kT), tg(rows / dp * kT);
      absl::Status st = ranks[r]->next_batch_into(rows, kT, r, dp, in.data(), tg.data());
      EXPECT_TRUE(st.ok()) << st;
      for (int64_t i = 0; i < rows / dp; ++i) {
        const int32_t first = in[i * kT];
        // Targets are the inputs shifted by one within the source's own stream.
        EXPECT_EQ(tg[i * kT], first + 1);
        out.emplace_back(first / kBase, first % kBase);
      }
    }
  }
  return out;
}

TEST(Mixture, ParsesInlineAndFileSpecs) {
  Sources s;
  auto spec = parse_data_spec(s.spec(7, 2, 1), {"500:a=1,c=3"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->is_mixture());
  EXPECT_EQ(spec->names(), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(spec->stages.size(), 2u);
  EXPECT_NEAR(spec->stages[0].weights[0], 0.7, 1e-12);
  EXPECT_NEAR(spec->stages[0].weights[2], 0.1, 1e-12);
  EXPECT_EQ(spec->stages[1].start_tokens, 500);
  EXPECT_NEAR(spec->stages[1].weights[1], 0.0, 0);
  EXPECT_NEAR(spec->stages[1].weights[2], 0.75, 1e-12);

  const fs::path file = tmp("mix.json");
  std::ofstream(file) << nlohmann::json{
      {"sources", {{{"name", "a"}, {"dir", s.a}, {"weight", 1}}, {{"name", "b"}, {"dir", s.b}, {"weight", 3}}}},
      {"stages", {{{"at_tokens", 800}, {"weights", {{"b", 1}}}}}}}.dump();
  auto f = parse_data_spec(file.string(), {});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->stages.size(), 2u);
  EXPECT_NEAR(f->stages[0].weights[1], 0.75, 1e-12);
  EXPECT_EQ(f->stages[1].weights, (std::vector<double>{0.0, 1.0}));

  auto one = parse_data_spec(s.a, {});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->is_mixture());
}

TEST(Mixture, BadSpecsAreRefusedByName) {
  Sources s;
  const std::string A = "a=" + s.a, B = ",b=" + s.b;
  const std::vector<std::pair<std::pair<std::string, std::vector<std::string>>, std::string>> cases = {
      {{A + ":-1" + B + ":1", {}}, "the weight of 'a' is -1; weights are >= 0"},
      {{A + ":abc" + B + ":1", {}}, "the weight of 'a' is 'abc', not a number"},
      {{A + ":nan" + B + ":1", {}}, "the weight of 'a' is 'nan', not a number"},
      {{A + ":0" + B + ":0", {}}, "every weight is zero"},
      {{A + ":1,a=" + s.b + ":1", {}}, "source 'a' is given twice"},
      {{A + ":1,b=/no/such/dir:1", {}}, "source 'b': /no/such/dir is not a directory"},
      {{"/no/such/dir", {}}, "--data /no/such/dir is not a directory"},
      {{A + ":1" + B + ":1", {"100:z=1"}}, "'z=1' does not name a source of --data"},
      {{A + ":1" + B + ":1", {"100:a=1", "50:b=1"}}, "stage boundaries must increase"},
      {{A + ":1" + B + ":1", {"0:a=1"}}, "is not a whole number of tokens >= 1"},
      {{A + ":1" + B + ":1", {"100:a=0,b=0"}}, "every weight is zero"},
      {{A + ":1" + B + ":1", {"100"}}, "not TOKENS:NAME=WEIGHT"},
      {{s.a, {"100:a=1"}}, "--data-stage needs a mixture"},
  };
  for (const auto& [in, want] : cases) {
    auto r = parse_data_spec(in.first, in.second);
    ASSERT_FALSE(r.ok()) << in.first;
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos)
        << in.first << ": " << r.status().message();
  }
  auto spec = parse_data_spec(A + ":1" + B + ":1", {"1000:a=1"});
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(check_stages_fit(*spec, 1001).ok());
  EXPECT_NE(std::string(check_stages_fit(*spec, 1000).message()).find("beyond the run"),
            std::string::npos);
  // A boundary no row starts at or after never takes effect (1000 of a 1024-token run in rows
  // of 32: the last row starts at 992); one at the last row's start does.
  EXPECT_NE(std::string(check_stages_fit(*spec, 1024, 32).message()).find("would never take effect"),
            std::string::npos);
  EXPECT_TRUE(check_stages_fit(*spec, 1032, 32).ok());
}

TEST(Mixture, AnotherTokenizerIsRefused) {
  Sources s;
  const std::string other = make_source("other_tok", 3 * kBase, 100, "{\"other\": 1}");
  auto same = parse_data_spec(s.spec(1, 1, 1), {});
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(check_same_tokenizer(*same).ok());
  auto diff = parse_data_spec("a=" + s.a + ":1,x=" + other + ":1", {});
  ASSERT_TRUE(diff.ok());
  const std::string msg(check_same_tokenizer(*diff).message());
  EXPECT_NE(msg.find("source 'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another tokenizer"), std::string::npos) << msg;
}

// Rows come from the sources in the weights' proportions, each source's rows are consecutive
// pieces of its stream from its start.
TEST(Mixture, BlendsRowsInProportionFromEachStream) {
  Sources s;
  MixtureLoader m = open(s.spec(0.5, 0.3, 0.2));
  const auto rows = read_rows({&m}, 10, 10);
  std::map<int, std::vector<int64_t>> pos;
  for (const auto& [src, p] : rows) pos[src].push_back(p);
  EXPECT_EQ(pos[0].size(), 50u);
  EXPECT_EQ(pos[1].size(), 30u);
  EXPECT_EQ(pos[2].size(), 20u);
  for (const auto& [src, ps] : pos)
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i], static_cast<int64_t>(i) * kT) << src;
  EXPECT_EQ(m.tokens_by_source(), (nlohmann::json{{"a", 50 * kT}, {"b", 30 * kT}, {"c", 20 * kT}}));
}

// The same rows in the same order whatever the data-parallel size and the rows per call.
TEST(Mixture, RowsIndependentOfLayout) {
  Sources s;
  const std::string spec = s.spec(0.45, 0.35, 0.2);
  const std::vector<std::string> stages = {std::to_string(13 * kT) + ":c=1,a=1"};
  MixtureLoader one = open(spec, stages);
  const auto want = read_rows({&one}, 24, 4);
  MixtureLoader r0 = open(spec, stages), r1 = open(spec, stages);
  EXPECT_EQ(read_rows({&r0, &r1}, 24, 4), want);
  MixtureLoader q0 = open(spec, stages), q1 = open(spec, stages), q2 = open(spec, stages);
  EXPECT_EQ(read_rows({&q0, &q1, &q2}, 6, 16), want);
  EXPECT_EQ(r0.state_json(), one.state_json());
  EXPECT_EQ(q2.state_json(), one.state_json());
}

// A stage starts at the first row whose first token is at or past its boundary.
TEST(Mixture, StageSwitchesAtItsBoundary) {
  Sources s;
  MixtureLoader m = open(s.spec(1, 0, 0), {std::to_string(5 * kT + 1) + ":c=1"});
  const auto rows = read_rows({&m}, 4, 3);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].first, i < 6 ? 0 : 2) << i;
  EXPECT_EQ(m.stage(), 1u);
}

// Stop after some steps at dp 1, resume at dp 2 with other weights and a new source: every source
// goes on where it stopped (positions 0, T, 2T, ... with no gap and no repeat), the dropped
// source is named, and the state before the stop equals an uninterrupted run's.
TEST(Mixture, ResumeOnAnotherLayoutWithOtherWeightsNeitherRepeatsNorSkips) {
  Sources s;
  const std::string before = "a=" + s.a + ":0.6,b=" + s.b + ":0.4";
  MixtureLoader m = open(before);
  auto seen = read_rows({&m}, 8, 5);
  const nlohmann::json saved = m.state_json();
  // Through the checkpoint's JSON text, as a resume reads it.
  const nlohmann::json reread = nlohmann::json::parse(saved.dump());

  const std::string after = "a=" + s.a + ":0.2,b=" + s.b + ":0.3,c=" + s.c + ":0.5";
  MixtureLoader r0 = open(after), r1 = open(after);
  ASSERT_TRUE(r0.load_state_json(reread).ok());
  ASSERT_TRUE(r1.load_state_json(reread).ok());
  const auto notes = r0.resume_notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("source 'c' is new"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("the weights changed"), std::string::npos) << notes[1];
  const auto more = read_rows({&r0, &r1}, 8, 5);
  seen.insert(seen.end(), more.begin(), more.end());
  std::map<int, std::vector<int64_t>> pos;
  for (const auto& [src, p] : seen) pos[src].push_back(p);
  ASSERT_EQ(pos.size(), 3u);
  int64_t rows = 0;
  for (const auto& [src, ps] : pos) {
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i], static_cast<int64_t>(i) * kT) << src;
    rows += static_cast<int64_t>(ps.size());
  }
  EXPECT_EQ(rows, 80);
  // After the resume the new weights hold: 40 rows, 8 / 12 / 20.
  std::map<int, int> after_counts;
  for (const auto& [src, p] : more) ++after_counts[src];
  EXPECT_EQ(after_counts, (std::map<int, int>{{0, 8}, {1, 12}, {2, 20}}));

  // Dropping a source is said; a single directory's state is refused by a mixture.
  MixtureLoader only_a = open("a=" + s.a + ":1");
  ASSERT_TRUE(only_a.load_state_json(reread).ok());
  bool dropped = false;
  for (const auto& n : only_a.resume_notes()) dropped |= n.find("source 'b' of the checkpoint") != std::string::npos;
  EXPECT_TRUE(dropped);
  auto plain = DataLoader::open(s.a, "train", {});
  ASSERT_TRUE(plain.ok());
  const absl::Status st = only_a.load_state_json(plain->state_json());
  EXPECT_NE(std::string(st.message()).find("not a mixture's"), std::string::npos) << st;
}

}  // namespace
}  // namespace vt::data
