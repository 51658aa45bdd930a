// Tensor parallelism (Megatron-LM's, docs/design.md "Parallelism"): the exchanges at the edges of
// a tensor-parallel region and the arithmetic of its shards, in one place. Attention heads, the
// MLP's hidden units and the vocabulary are split over the tp ranks; column-parallel GEMMs (QKV,
// fc, the lm head) need whole inputs and give split outputs, row-parallel GEMMs (the attention
// output, proj) take split inputs and give partial sums. The model (src/model) calls these and
// nothing else of the tp communicator; with one tp rank every function is the identity.
#pragma once
#include <cstdint>

#include "core/communicator.h"
#include "core/tensor.h"

namespace vt::tp {

// The slice [offset, offset + size) of n items that rank `rank` of `ranks` holds (n is a
// multiple of ranks: make_grid_shape checks heads, KV heads, the MLP width and the padded
// vocabulary).
struct Shard {
  int64_t offset = 0, size = 0;
};
Shard shard(int64_t n, int ranks, int rank);

// Megatron's g ("reduce from the tensor-parallel region"): the partial outputs of a row-parallel
// GEMM or of the vocabulary-split embedding, summed in place into the whole output. Backward:
// the identity.
void reduce_outputs(Communicator* tp, const Tensor& partial);

// The backward of Megatron's f ("copy to the tensor-parallel region"): the input gradients of
// column-parallel GEMMs, summed in place. Forward: the identity.
void reduce_input_grads(Communicator* tp, const Tensor& partial_dx);

// A replicated parameter read by every rank's heads (a gain, a mixing scalar): its gradient's
// per-rank parts summed, in place (a device tensor) or returned (a host double).
void reduce_replicated_grad(Communicator* tp, const Tensor& partial);
double reduce_replicated_grad(Communicator* tp, double partial);

// Vocabulary-parallel cross entropy: each rank's per-row max, sum of exp(logit - its max) and
// target logit over its vocabulary shard become the whole vocabulary's (the sums rescaled to
// the global max; the target logit is nonzero on one rank). row_max is replaced by the global
// max.
void combine_xent_stats(Communicator* tp, Tensor& row_max, const Tensor& row_sum,
                        const Tensor& target_z);

// A table split by vocabulary rows feeding a layer split by heads: `full` (N, K) holds this
// rank's rows (zeros for ids other ranks own); every rank gets its heads' columns (N, K / P) of
// the sum over ranks (a reduce-scatter). Its backward gathers every rank's head columns of the
// gradient (N, K / P) into (N, K), for each rank to add the rows it owns.
void rows_to_heads(Communicator* tp, const Tensor& full, const Tensor& heads);
void heads_to_rows(Communicator* tp, const Tensor& heads_grad, const Tensor& full);

}  // namespace vt::tp
