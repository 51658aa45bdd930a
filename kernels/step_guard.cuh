// The guard of an optimizer step formed on the GPU (core/optim_math.h, kGuard*): the clip factor
// and whether to apply the update, from the fp64 sum of squares of the gradients a reduction left
// on the device (kernels/reduce.cuh) and the step's per-token losses, so that no host read decides
// them (a CUDA graph of the whole optimizer step holds this kernel). Device pointers.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace vt::cuda {

// One block. norm = sqrt(*sum_squares) in fp64; guard[kGuardGradScale] = float(clip factor):
// max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm, else 1 (optim/clip.h's
// clip_scale, the same fp64 operations); guard[kGuardApply] = 1 when the norm and every one of
// the n_losses losses are finite, else 0; guard[kGuardSumSquares, +2) = the 8 bytes of
// *sum_squares. losses may be null when n_losses is 0.
void step_guard(const double* sum_squares, const float* losses, int64_t n_losses,
                double max_norm, float* guard, cudaStream_t stream);

}  // namespace vt::cuda
