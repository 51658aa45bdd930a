// step_guard (see step_guard.cuh): one block of 256 threads; the losses' finiteness by
// __syncthreads_or, the clip factor by thread 0 in fp64 (IEEE sqrt and division: the bits the
// host's clip_scale forms).
#include "kernels/step_guard.cuh"

#include <cfloat>

#include "core/optim_math.h"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    step_guard_kernel(const double* sum_squares, const float* losses, int64_t n_losses,
                      double max_norm, float* guard) {
  int bad = 0;
  for (int64_t i = threadIdx.x; i < n_losses; i += kThreads)
    bad |= !(fabsf(losses[i]) <= FLT_MAX);  // inf or NaN
  bad = __syncthreads_or(bad);
  if (threadIdx.x != 0) return;
  const double s = *sum_squares;
  const double norm = sqrt(s);
  const double scale = max_norm <= 0.0 || !(norm > max_norm) ? 1.0 : max_norm / (norm + 1e-6);
  guard[kGuardGradScale] = static_cast<float>(scale);
  guard[kGuardApply] = !bad && fabs(norm) <= DBL_MAX ? 1.0f : 0.0f;
  __builtin_memcpy(static_cast<void*>(guard + kGuardSumSquares), &s, sizeof s);
}

}  // namespace

void step_guard(const double* sum_squares, const float* losses, int64_t n_losses,
                double max_norm, float* guard, cudaStream_t stream) {
  VT_LAUNCH(step_guard_kernel, 1, kThreads, 0, stream, sum_squares, losses, n_losses, max_norm,
            guard);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
