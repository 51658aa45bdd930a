// Gradient norms and global grad-norm clipping (docs/model.md "Optimizer groups": clipping is an
// option, off by default). Sums of squares are accumulated in double over fixed-size chunks that
// are added in a fixed order, so the result does not depend on the number of OpenMP threads. The
// store-level functions run on the store's device (ops::sum_squares, ops::scale_copy on each
// gradient view); the CPU backend's ops::sum_squares is the same chunked sum as sum_squares()
// below.
#pragma once
#include <cstdint>

#include "core/arena.h"

namespace vt::optim {

// sum_i x[i]^2 in double, deterministic for any thread count.
double sum_squares(const float* x, int64_t n);

// sqrt of the sum of squares over every gradient of the store (each parameter's own elements,
// never the alignment padding between parameters). Local to this process: a distributed caller
// all-reduces grad_sum_squares() before taking the root.
double grad_sum_squares(const ParamStore& store);
double grad_norm(const ParamStore& store);

// The factor clipping applies for a given global norm: 1 when max_norm <= 0 (clipping off) or
// norm <= max_norm, else max_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_'s rule).
double clip_scale(double norm, double max_norm);

// Multiplies every gradient by `scale` (no-op when scale == 1).
void scale_grads(ParamStore& store, double scale);

// Computes the global norm, clips when max_norm > 0 and the norm exceeds it, and returns the
// norm measured before clipping. `applied_scale` (optional) receives the factor used.
double clip_grad_norm(ParamStore& store, double max_norm, double* applied_scale = nullptr);

}  // namespace vt::optim
