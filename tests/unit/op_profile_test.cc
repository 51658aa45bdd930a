// op_profile: `vtrain train --profile` counts each tensor op once (the outermost dispatch), with
// GEMM FLOPs from the shapes, and nothing while disabled or paused.
#include "core/op_profile.h"

#include <gtest/gtest.h>

#include "core/ops.h"
#include "core/tensor.h"
#include "optim/muon.h"

namespace vt {
namespace {

const op_profile::Entry* find(const std::vector<op_profile::Entry>& es, const std::string& op) {
  for (const auto& e : es)
    if (e.op == op) return &e;
  return nullptr;
}

class OpProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    op_profile::reset();
    op_profile::enable(true);
  }
  void TearDown() override {
    op_profile::enable(false);
    op_profile::reset();
  }
};

TEST_F(OpProfile, CountsCallsAndGemmFlops) {
  Tensor x = Tensor::zeros({6, 4}), w = Tensor::zeros({4, 5}), y = Tensor::zeros({6, 5});
  ops::matmul(x, w, y, false);
  ops::matmul(x, w, y, true);
  Tensor dx = Tensor::zeros({6, 4});
  ops::matmul_dx(y, w, dx, false);
  ops::axpy(y, y, 1.0f);
  const auto es = op_profile::entries();
  const auto* g = find(es, "gemm");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->calls, 3);
  EXPECT_DOUBLE_EQ(g->flops, 3 * 2.0 * 6 * 5 * 4);
  EXPECT_GE(g->seconds, 0.0);
  const auto* a = find(es, "axpy");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->calls, 1);
  EXPECT_EQ(a->flops, 0.0);
  const std::string table = op_profile::report(1.0, 1);
  EXPECT_NE(table.find("gemm"), std::string::npos);
  EXPECT_NE(table.find("(outside the ops)"), std::string::npos);
}

// Muon's host Newton-Schulz calls sgemm directly: it is one op of its own, with its FLOPs
// (per iteration X X^T, A A and B X on the small side m = 3 of a 5 x 3 matrix).
TEST_F(OpProfile, CountsNewtonSchulzWithItsFlops) {
  std::vector<float> g(15), out(15);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i + 1);
  optim::newton_schulz(g.data(), 5, 3, out.data(), 4, optim::NsCoefficients::standard());
  const auto es = op_profile::entries();
  const auto* ns = find(es, "newton_schulz");
  ASSERT_NE(ns, nullptr);
  EXPECT_EQ(ns->calls, 1);
  EXPECT_DOUBLE_EQ(ns->flops, 4 * (4.0 * 3 * 3 * 5 + 2.0 * 3 * 3 * 3));
}

TEST_F(OpProfile, NestedScopesCountOnlyTheOutermost) {
  {
    op_profile::Scope outer("outer");
    op_profile::Scope inner("inner");
    Tensor y = Tensor::zeros({8});
    ops::axpy(y, y, 2.0f);
  }
  const auto es = op_profile::entries();
  EXPECT_NE(find(es, "outer"), nullptr);
  EXPECT_EQ(find(es, "inner"), nullptr);
  EXPECT_EQ(find(es, "axpy"), nullptr);
  EXPECT_EQ(find(es, "zero_fill"), nullptr);
}

TEST_F(OpProfile, DisabledAndPausedRecordNothing) {
  Tensor y = Tensor::zeros({8});
  op_profile::reset();  // drop its zero fill
  {
    op_profile::Pause pause;
    EXPECT_FALSE(op_profile::enabled());
    ops::axpy(y, y, 2.0f);
  }
  EXPECT_TRUE(op_profile::enabled());
  op_profile::enable(false);
  ops::axpy(y, y, 2.0f);
  EXPECT_TRUE(op_profile::entries().empty());
  op_profile::enable(true);
  ops::axpy(y, y, 2.0f);
  ASSERT_EQ(op_profile::entries().size(), 1u);
  EXPECT_EQ(op_profile::entries()[0].op, "axpy");
}

// A device clock whose mark i stands at i milliseconds: a device op's time is read from the marks
// (the host clock plays no part), a host op's is not, and marks are read back in batches.
class FakeClock final : public op_profile::DeviceClock {
 public:
  int mark() override { return next_++; }
  double seconds_between(int a, int b) override {
    ++reads;
    return (b - a) * 1e-3;
  }
  void recycle() override {
    ++recycles;
    next_ = 0;
  }
  const char* name() const override { return "fake marks"; }
  int reads = 0, recycles = 0;

 private:
  int next_ = 0;
};

TEST_F(OpProfile, DeviceOpsAreTimedByTheDeviceClock) {
  FakeClock clock;
  op_profile::set_device_clock(&clock);
  {
    op_profile::Scope dev("device_op", 10.0, /*on_device=*/true);  // marks 0 and 1
  }
  {
    op_profile::Scope dev("device_op", 10.0, /*on_device=*/true);  // marks 2 and 3
  }
  {
    op_profile::Scope host("host_op");  // the host clock: no mark
  }
  EXPECT_EQ(clock.reads, 0);  // nothing is read before the profile is asked for
  const auto es = op_profile::entries();
  EXPECT_EQ(clock.reads, 2);
  EXPECT_EQ(clock.recycles, 1);
  const auto* d = find(es, "device_op");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->calls, 2);
  EXPECT_DOUBLE_EQ(d->seconds, 2e-3);
  EXPECT_DOUBLE_EQ(d->flops, 20.0);
  ASSERT_NE(find(es, "host_op"), nullptr);
  EXPECT_NE(op_profile::report(1.0, 1).find("device ops timed by fake marks"), std::string::npos);
  op_profile::set_device_clock(nullptr);
  EXPECT_NE(op_profile::report(1.0, 1).find("host time per step"), std::string::npos);
}

TEST_F(OpProfile, DeviceMarksAreReadInBoundedBatches) {
  FakeClock clock;
  op_profile::set_device_clock(&clock);
  for (int i = 0; i < 10000; ++i) op_profile::Scope dev("k", 0, true);
  // Read back every 4096 ops without being asked: the clock's pool never holds more.
  EXPECT_EQ(clock.reads, 8192);
  EXPECT_EQ(clock.recycles, 2);
  op_profile::set_device_clock(nullptr);  // resolves the rest
  EXPECT_EQ(clock.reads, 10000);
  const auto es = op_profile::entries();
  ASSERT_EQ(es.size(), 1u);
  EXPECT_EQ(es[0].calls, 10000);
  EXPECT_NEAR(es[0].seconds, 10000 * 1e-3, 1e-9);
}

// An op on the device backend is a device op: without a clock it is timed by the host, and with
// one by the clock (the dispatch in ops.cc tells them apart by the tensors' device).
TEST_F(OpProfile, TheDispatchMarksOnlyDeviceTensorsOps) {
  FakeClock clock;
  op_profile::set_device_clock(&clock);
  Tensor y = Tensor::zeros({8});
  op_profile::reset();
  ops::axpy(y, y, 2.0f);  // CPU tensors: host time
  op_profile::set_device_clock(nullptr);
  EXPECT_EQ(clock.reads, 0);
  ASSERT_NE(find(op_profile::entries(), "axpy"), nullptr);
}

}  // namespace
}  // namespace vt
