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

}  // namespace
}  // namespace vt
