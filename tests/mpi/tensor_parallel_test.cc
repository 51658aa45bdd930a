// parallel/tensor_parallel.h on 1, 2 and 4 ranks: the shard arithmetic; a table split by rows
// into heads and back (small integers, exact whatever the reduction order); the vocabulary-
// parallel cross entropy's statistics equal the whole vocabulary's (against float64 on the host);
// the sums at the edges of a region.
// vtrain-mpi-ranks: 1 2 4
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"

namespace vt {
namespace {

Tensor host(const std::vector<float>& v, Shape shape) {
  return Tensor::from_host(v.data(), std::move(shape), Device::kCPU);
}

TEST(TensorParallel, ShardsTileTheRange) {
  for (int ranks : {1, 2, 4, 8}) {
    int64_t next = 0;
    for (int r = 0; r < ranks; ++r) {
      const tp::Shard s = tp::shard(24, ranks, r);
      EXPECT_EQ(s.offset, next);
      EXPECT_EQ(s.size, 24 / ranks);
      next += s.size;
    }
    EXPECT_EQ(next, 24);
  }
}

TEST(TensorParallel, RowsToHeadsAndBack) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int P = world.size(), me = world.rank();
  const int64_t N = 3, K = 4 * P, Kl = K / P;
  // Rank q's partial rows: element (i, k) = (q + 1) * (i * K + k) when q owns row i (i % P == q).
  auto partial = [&](int q) {
    std::vector<float> v(N * K, 0.0f);
    for (int64_t i = 0; i < N; ++i)
      if (i % P == q)
        for (int64_t k = 0; k < K; ++k) v[i * K + k] = static_cast<float>((q + 1) * (i * K + k));
    return v;
  };
  const Tensor full = host(partial(me), {N, K});
  const Tensor heads = Tensor::zeros({N, Kl});
  if (P == 1) {
    ops::copy(heads, full);
  } else {
    tp::rows_to_heads(&world, full, heads);
  }
  const std::vector<float> got = heads.to_host_f32();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t k = 0; k < Kl; ++k) {
      float want = 0;
      for (int q = 0; q < P; ++q) want += partial(q)[i * K + me * Kl + k];
      EXPECT_EQ(got[i * Kl + k], want) << "row " << i << " col " << k;
    }
  if (P == 1) return;
  // Back: every rank's head columns of a gradient, side by side.
  std::vector<float> mine(N * Kl);
  for (int64_t j = 0; j < N * Kl; ++j) mine[j] = static_cast<float>(100 * me + j);
  const Tensor rows = Tensor::zeros({N, K});
  tp::heads_to_rows(&world, host(mine, {N, Kl}), rows);
  const std::vector<float> back = rows.to_host_f32();
  for (int q = 0; q < P; ++q)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < Kl; ++k)
        EXPECT_EQ(back[i * K + q * Kl + k], static_cast<float>(100 * q + i * Kl + k));
}

TEST(TensorParallel, VocabularyShardsGiveTheWholeLogSumExp) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int P = world.size(), me = world.rank();
  const int64_t N = 3, V = 8 * P, Vl = V / P;
  auto logit = [](int64_t i, int64_t j) { return static_cast<float>(std::sin(0.7 * i + 0.3 * j) * 4); };
  auto capped = [&](int64_t i, int64_t j) { return 15.0 * std::tanh(logit(i, j) / 15.0); };
  const std::vector<int32_t> targets = {1, static_cast<int32_t>(V - 1), static_cast<int32_t>(V / 2)};
  std::vector<float> slice(N * Vl);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vl; ++j) slice[i * Vl + j] = logit(i, me * Vl + j);
  XentArgs xa;
  xa.logits = host(slice, {N, Vl});
  xa.n_valid = Vl;
  xa.col_offset = me * Vl;
  xa.targets = Tensor::from_host(targets.data(), {N}, Device::kCPU);
  xa.cap = 15.0f;  // soft cap: the loss reads cap * tanh(logit / cap)
  Tensor row_max = Tensor::zeros({N}), row_sum = Tensor::zeros({N}), target_z = Tensor::zeros({N});
  ops::xent_partial(xa, row_max, row_sum, target_z);
  tp::combine_xent_stats(&world, row_max, row_sum, target_z);
  Tensor lse = Tensor::zeros({N}), loss = Tensor::zeros({N});
  ops::xent_finish(row_max, row_sum, target_z, lse, loss);
  const std::vector<float> got_lse = lse.to_host_f32(), got_loss = loss.to_host_f32();
  for (int64_t i = 0; i < N; ++i) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, capped(i, j));
    for (int64_t j = 0; j < V; ++j) s += std::exp(capped(i, j) - m);
    const double want = m + std::log(s);
    EXPECT_NEAR(got_lse[i], want, 1e-5 * std::abs(want) + 1e-5) << "row " << i;
    EXPECT_NEAR(got_loss[i], want - capped(i, targets[i]), 1e-4) << "row " << i;
  }
}

TEST(TensorParallel, EdgeSumsAndReplicatedGradients) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int P = world.size(), me = world.rank();
  const Tensor t = host({1.0f * me, 2.0f}, {2});
  tp::reduce_outputs(&world, t);
  std::vector<float> v = t.to_host_f32();
  EXPECT_EQ(v[0], static_cast<float>(P * (P - 1) / 2));
  EXPECT_EQ(v[1], 2.0f * P);
  const Tensor d = host({1.0f}, {1});
  tp::reduce_input_grads(&world, d);
  EXPECT_EQ(d.to_host_f32()[0], static_cast<float>(P));
  EXPECT_EQ(tp::reduce_replicated_grad(&world, 0.5), 0.5 * P);
}

}  // namespace
}  // namespace vt
