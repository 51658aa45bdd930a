// The cross-entropy op family: soft-capped vocabulary-parallel cross-entropy in pieces
// (semantics: cpu_kernels.h xent_*): per-shard row statistics, their rescale to the global max,
// the loss, and the logits gradient. Statistics are f32 (N). Host kernels: cpu_kernels.h;
// CUDA kernels: kernels/xent.cu.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt {

struct XentArgs {
  Tensor logits;        // (N, ld) local vocabulary slice
  int64_t n_valid = 0;  // real columns of the slice
  int64_t col_offset = 0;
  Tensor targets;       // (N) i32
  float cap = 0.0f;
};

namespace ops {

// Writes row_max, row_sumexp, target_z (N, f32).
void xent_partial(const XentArgs& x, const Tensor& row_max, const Tensor& row_sumexp,
                  const Tensor& target_z);
// row_sumexp *= exp(row_max - global_max) (before the sum over vocabulary shards).
void xent_rescale(const Tensor& row_sumexp, const Tensor& row_max, const Tensor& global_max);
// lse = max + log(sumexp); loss = lse - target_z (all (N) f32).
void xent_finish(const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_z,
                 const Tensor& lse, const Tensor& loss);
// dlogits = grad_scale * (softmax(z) - onehot) * dz/dlogit, written.
void xent_backward(const XentArgs& x, const Tensor& lse, float grad_scale, const Tensor& dlogits);
// The whole loss end in one pass over the logits, for a slice that holds the whole vocabulary
// (no shards to combine): lse and loss as xent_partial + xent_finish, and dlogits as
// xent_backward(grad_scale), each row read once from memory and its gradient written once.
// dlogits may be x.logits itself (in place; the training loss end keeps one logits-sized buffer
// so). Same results as the unfused ops up to the order of the row sums (host: bit for bit).
void xent_loss_grad(const XentArgs& x, float grad_scale, const Tensor& lse, const Tensor& loss,
                    const Tensor& dlogits);

}  // namespace ops
}  // namespace vt
