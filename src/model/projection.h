// The V and O projections of a layer (docs/model.md, "Block shapes"): a matrix, the identity
// times a gain s, or the reparameterization x (s W0 + r dW) with a fixed W0 (identity or
// orthogonal). Tensor parallel: the V projection's output columns and the O projection's input
// rows are this rank's heads; an identity takes or places those columns of the full width.
// The O projection's output is the rank's partial sum (the caller all-reduces it); parameter
// gradients of the shared gains s, r are summed over TP here.
#pragma once
#include "core/tensor.h"
#include "model/gpt.h"

namespace vt::projection {

// out (N, kv_local) = V(x), x (N, C).
void forward_in(const GPT& m, const Projection& p, const Tensor& x, const Tensor& out);
// Accumulates the parameters' gradients; dx (N, C) += (or =, when !accumulate) d V(x) / dx.
void backward_in(const GPT& m, const Projection& p, const Tensor& x, const Tensor& d,
                 const Tensor& dx, bool accumulate);
// o (N, C) = O(y) (this rank's partial sum), y (N, q_local).
void forward_out(const GPT& m, const Projection& p, const Tensor& y, const Tensor& o);
// dy (N, q_local) = d O(y) / dy for the replicated dout (N, C); accumulates parameter gradients.
void backward_out(const GPT& m, const Projection& p, const Tensor& y, const Tensor& dout,
                  const Tensor& dy);

// The effective matrix s W0 + r dW of a kReparam projection (local slice, f32).
Tensor effective_matrix(const GPT& m, const Projection& p);

}  // namespace vt::projection
