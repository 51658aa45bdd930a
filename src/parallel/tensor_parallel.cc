// Tensor parallelism's exchanges and shards (see tensor_parallel.h).
#include "parallel/tensor_parallel.h"

#include "core/check.h"
#include "core/ops.h"

namespace vt::tp {

Shard shard(int64_t n, int ranks, int rank) {
  VT_CHECK(ranks >= 1 && 0 <= rank && rank < ranks && n % ranks == 0);
  Shard s;
  s.size = n / ranks;
  s.offset = s.size * rank;
  return s;
}

void reduce_outputs(Communicator* tp, const Tensor& partial) { tp->all_reduce_sum(partial); }

void reduce_input_grads(Communicator* tp, const Tensor& partial_dx) { tp->all_reduce_sum(partial_dx); }

void reduce_replicated_grad(Communicator* tp, const Tensor& partial) { tp->all_reduce_sum(partial); }

double reduce_replicated_grad(Communicator* tp, double partial) {
  tp->all_reduce_sum(&partial, 1);
  return partial;
}

void combine_xent_stats(Communicator* tp, Tensor& row_max, const Tensor& row_sum,
                        const Tensor& target_z) {
  if (tp->size() == 1) return;
  Tensor global_max = row_max.clone();
  tp->all_reduce_max(global_max);
  ops::xent_rescale(row_sum, row_max, global_max);
  tp->all_reduce_sum(row_sum);
  tp->all_reduce_sum(target_z);
  row_max = global_max;
}

void rows_to_heads(Communicator* tp, const Tensor& full, const Tensor& heads) {
  const int P = tp->size();
  const int64_t N = full.shape()[0], K = full.shape()[1], Kl = K / P;
  VT_CHECK(heads.numel() == N * Kl);
  Tensor by_rank = Tensor::zeros({P, N, Kl}, heads.dtype(), heads.device());  // (rank, N, heads)
  for (int r = 0; r < P; ++r) ops::copy_2d(by_rank, r * N * Kl, Kl, full, r * Kl, K, N, Kl);
  tp->reduce_scatter_sum(by_rank, heads);
}

void heads_to_rows(Communicator* tp, const Tensor& heads_grad, const Tensor& full) {
  const int P = tp->size();
  const int64_t N = full.shape()[0], K = full.shape()[1], Kl = K / P;
  VT_CHECK(heads_grad.numel() == N * Kl);
  Tensor by_rank = Tensor::zeros({P, N, Kl}, heads_grad.dtype(), heads_grad.device());
  tp->all_gather(heads_grad, by_rank);
  for (int r = 0; r < P; ++r) ops::copy_2d(full, r * Kl, K, by_rank, r * N * Kl, Kl, N, Kl);
}

}  // namespace vt::tp
