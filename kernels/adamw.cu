// AdamW kernel (see adamw.cuh): elementwise, a grid-stride loop over chunks of 4 f32 (one
// 16-byte word of each of p, g, m, v), the grid one wave of 256-thread blocks
// (kernels/vec_access.cuh; a scalar path for unaligned operands and the tail); the same float
// operations as the CPU. The step's values by value or read from device memory
// (kernels/step_values.cuh).
#include "kernels/adamw.cuh"

#include <cmath>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/step_values.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::for_each_chunk;
using detail::load_chunk;
using detail::store_chunk;

constexpr int kThreads = detail::kElementwiseThreads;
constexpr int kBlocksPerSm = detail::kHeavyBlocksPerSm;  // sqrt and division subroutines
constexpr int kChunk = 4;  // one f32 word

// S: where the step's values come from (kernels/step_values.cuh). A step whose guard says "skip"
// writes nothing.
template <class S>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, S s, bool vec) {
  if (!s.apply()) return;
  const AdamWCoefs c = s.coefs();
  const float gs = s.grad_scale();
  constexpr int W = kChunk;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float gi[W], mi[W], vi[W], pi[W];
    load_chunk<W>(g + i, wide, count, gi);
    load_chunk<W>(m + i, wide, count, mi);
    load_chunk<W>(v + i, wide, count, vi);
    load_chunk<W>(p + i, wide, count, pi);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      gi[e] = gs * gi[e];  // x * 1 is x: the bits of an unscaled step
      mi[e] = c.b1 * mi[e] + c.omb1 * gi[e];
      vi[e] = c.b2 * vi[e] + c.omb2 * (gi[e] * gi[e]);
      pi[e] = pi[e] * c.decay - c.step_size * mi[e] / (sqrtf(vi[e] * c.inv_bc2) + c.eps);
    }
    store_chunk<W>(m + i, wide, count, mi);
    store_chunk<W>(v + i, wide, count, vi);
    store_chunk<W>(p + i, wide, count, pi);
  });
}

template <class S>
void launch_adamw(float* p, const float* g, float* m, float* v, int64_t n, S s,
                  cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v);
  VT_LAUNCH(adamw_kernel<S>, detail::elementwise_grid(n, kChunk, kBlocksPerSm), kThreads, 0,
            stream, p, g, m, v, n, s, vec);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, double lr,
                  double beta1, double beta2, double weight_decay, double eps, int64_t t,
                  cudaStream_t stream) {
  if (t < 1) cuda_fail(cudaErrorInvalidValue, "adamw_update: step count t must be >= 1",
                       __FILE__, __LINE__);
  AdamWStepArgs a;
  a.lr = lr;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.weight_decay = weight_decay;
  a.eps = eps;
  a.t = t;
  launch_adamw(p, g, m, v, n, detail::FixedStep<AdamWCoefs>{adamw_coefs(a)}, stream);
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const float* guard,
                  const float* coefs, cudaStream_t stream) {
  launch_adamw(p, g, m, v, n, detail::StepInMemory<AdamWCoefs>{guard, coefs}, stream);
}

}  // namespace vt::cuda
