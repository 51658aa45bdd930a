// train/rank_health.h: which ranks are stragglers (by hand), the window's averages and the
// compute = step - comm - data split, the reports' timing (every N steps, collective), the host
// names gathered from every rank, and the log and metrics forms.
#include "train/rank_health.h"

#include <gtest/gtest.h>

#include <cstring>

namespace vt {
namespace {

// A world of `n` ranks seen from rank 0: all_gather places rank 0's values first and fills the
// other ranks' from `others` (each call consumes the next row).
class FakeWorld final : public Communicator {
 public:
  FakeWorld(int n, std::vector<std::vector<float>> others) : n_(n), others_(std::move(others)) {}
  int size() const override { return n_; }
  int rank() const override { return 0; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float* in, float* out, int64_t k) override {
    std::memcpy(out, in, sizeof(float) * k);
    const std::vector<float>& row = others_.at(next_++);
    for (int64_t i = 0; i < k * (n_ - 1); ++i) out[k + i] = row.at(i);
  }
  void reduce_scatter_sum(const float*, float*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void send(const float*, int64_t, int, int) override {}
  void recv(float*, int64_t, int, int) override {}
  void barrier() override {}
  int gathers() const { return next_; }

 private:
  int n_;
  std::vector<std::vector<float>> others_;
  int next_ = 0;
};

// The other ranks' host names, each followed by its host's CPUs online (64 CPUs unless given).
std::vector<float> host_row(const std::vector<std::string>& names, std::vector<int> cpus = {}) {
  std::vector<float> row;
  cpus.resize(names.size(), 64);
  for (size_t k = 0; k < names.size(); ++k) {
    std::vector<float> h(65, 0.0f);
    for (size_t i = 0; i < names[k].size(); ++i) h[i] = static_cast<unsigned char>(names[k][i]);
    h[64] = static_cast<float>(cpus[k]);
    row.insert(row.end(), h.begin(), h.end());
  }
  return row;
}

TEST(RankHealth, StragglersAreAboveTheMedianByTheMarginAndTheFloor) {
  // Median of {1, 1.1, 1, 3} is 1.05.
  EXPECT_EQ(find_stragglers({1.0, 1.1, 1.0, 3.0}, 0.2, 0.0), (std::vector<int>{3}));
  // 1.3 is 30% above the median 1.0 but only 0.3 s: a floor of 0.35 s keeps it off.
  EXPECT_EQ(find_stragglers({1.0, 1.3, 1.0, 1.0}, 0.2, 0.0), (std::vector<int>{1}));
  EXPECT_TRUE(find_stragglers({1.0, 1.3, 1.0, 1.0}, 0.2, 0.35).empty());
  EXPECT_TRUE(find_stragglers({1.0, 1.3, 1.0, 1.0}, 0.35, 0.0).empty());
  // Slowest first; an even job has none; one rank has none.
  EXPECT_EQ(find_stragglers({5.0, 1.0, 1.0, 1.0, 9.0}, 0.2, 0.0), (std::vector<int>{4, 0}));
  EXPECT_TRUE(find_stragglers({1.0, 1.0, 1.0}, 0.2, 0.0).empty());
  EXPECT_TRUE(find_stragglers({7.0}, 0.2, 0.0).empty());
}

TEST(RankHealth, ReportsEveryNStepsWithTheWindowsAveragesAndHosts) {
  // Rank 0 steps 1.0 s with 0.25 s in communication and 0.05 s reading data: compute 0.7.
  // Ranks 1..3 send their window averages (compute, comm, data); rank 2 is slow.
  FakeWorld world(4, {host_row({"node-b", "node-c", "node-d"}),
                      {0.70f, 0.30f, 0.0f, 2.0f, 0.01f, 0.0f, 0.69f, 0.31f, 0.0f}});
  RankHealth health(&world, 3, 0.2, 0.1);
  EXPECT_EQ(world.gathers(), 1);  // the host names, at construction
  for (int64_t step = 1; step <= 3; ++step) {
    health.add_step(1.0, 0.25, 0.05);
    auto r = health.maybe_report(step);
    if (step < 3) {
      EXPECT_FALSE(r.has_value());
      continue;
    }
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(world.gathers(), 2);
    EXPECT_EQ(r->step, 3);
    EXPECT_EQ(r->steps, 3);
    ASSERT_EQ(r->ranks.size(), 4u);
    EXPECT_NEAR(r->ranks[0].compute_s, 0.7, 1e-6);
    EXPECT_NEAR(r->ranks[0].comm_s, 0.25, 1e-6);
    EXPECT_NEAR(r->ranks[0].data_s, 0.05, 1e-6);
    EXPECT_NEAR(r->ranks[2].compute_s, 2.0, 1e-6);
    EXPECT_NEAR(r->median_compute_s, 0.7, 1e-6);
    EXPECT_EQ(r->stragglers, (std::vector<int>{2}));
    ASSERT_EQ(r->hosts.size(), 4u);
    EXPECT_EQ(r->hosts[2], "node-c");
    const std::string line = format_health(*r);
    EXPECT_NE(line.find("straggler at step 3: rank 2 (host node-c)"), std::string::npos) << line;
    EXPECT_NE(line.find("2.86x the median"), std::string::npos) << line;
    const nlohmann::json j = health_json(*r);
    EXPECT_EQ(j["straggler"][0]["rank"], 2);
    EXPECT_EQ(j["straggler"][0]["host"], "node-c");
    EXPECT_EQ(j["health"]["compute_s"].size(), 4u);
    EXPECT_TRUE(j["health"]["oversubscribed"].empty());  // one rank per host, 64 CPUs each
    EXPECT_EQ(line.find("oversubscribed"), std::string::npos) << line;
  }
  // The window starts again: nothing before the next multiple of 3.
  health.add_step(1.0, 0.25, 0.05);
  EXPECT_FALSE(health.maybe_report(4).has_value());
  EXPECT_EQ(world.gathers(), 2);
}

TEST(RankHealth, AStragglerOnAnOversubscribedHostSaysSo) {
  // Ranks 1..3 on node-b, which has 2 CPUs: 3 ranks there. Rank 0 is this machine (a host of its
  // own, whatever its CPUs). Rank 3 is slow.
  FakeWorld world(4, {host_row({"node-b", "node-b", "node-b"}, {2, 2, 2}),
                      {0.7f, 0.3f, 0.0f, 0.7f, 0.3f, 0.0f, 1.5f, 0.0f, 0.0f}});
  RankHealth health(&world, 1, 0.2, 0.0);
  health.add_step(1.0, 0.3, 0.0);
  auto r = health.maybe_report(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->stragglers, (std::vector<int>{3}));
  ASSERT_EQ(r->oversubscribed.size(), 1u);
  EXPECT_EQ(r->oversubscribed[0], "node-b: 3 ranks on 2 CPUs");
  const std::string line = format_health(*r);
  EXPECT_NE(line.find("straggler at step 1: rank 3 (host node-b)"), std::string::npos) << line;
  EXPECT_NE(line.find("(oversubscribed: node-b: 3 ranks on 2 CPUs; ranks there take turns"),
            std::string::npos) << line;
  EXPECT_EQ(health_json(*r)["health"]["oversubscribed"][0], "node-b: 3 ranks on 2 CPUs");
  // The same job on hosts with CPUs enough: a plain straggler line.
  FakeWorld roomy(4, {host_row({"node-b", "node-b", "node-b"}, {8, 8, 8}),
                      {0.7f, 0.3f, 0.0f, 0.7f, 0.3f, 0.0f, 1.5f, 0.0f, 0.0f}});
  RankHealth h2(&roomy, 1, 0.2, 0.0);
  h2.add_step(1.0, 0.3, 0.0);
  auto r2 = h2.maybe_report(1);
  ASSERT_TRUE(r2.has_value());
  EXPECT_TRUE(r2->oversubscribed.empty());
  EXPECT_EQ(format_health(*r2).find("oversubscribed"), std::string::npos);
}

TEST(RankHealth, EvenRanksAndReportsOff) {
  FakeWorld world(2, {host_row({"node-b"}), {0.7f, 0.3f, 0.0f}});
  RankHealth health(&world, 1, 0.2, 0.0);
  health.add_step(1.0, 0.3, 0.0);
  auto r = health.maybe_report(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->stragglers.empty());
  EXPECT_NE(format_health(*r).find("2 ranks even"), std::string::npos);
  EXPECT_TRUE(health_json(*r)["straggler"].empty());
  FakeWorld quiet(2, {host_row({"node-b"})});
  RankHealth off(&quiet, 0, 0.2, 0.0);
  off.add_step(1.0, 0.3, 0.0);
  EXPECT_FALSE(off.maybe_report(100).has_value());
  EXPECT_EQ(quiet.gathers(), 1);
}

}  // namespace
}  // namespace vt
