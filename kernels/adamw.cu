// AdamW kernel (see adamw.cuh): elementwise, a grid-stride loop over chunks of 4 f32 (one
// 16-byte word of each of p, g, m, v), the grid one wave of 256-thread blocks
// (kernels/vec_access.cuh; a scalar path for unaligned operands and the tail); the same float
// operations as the CPU.
#include "kernels/adamw.cuh"

#include <cmath>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
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

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float decay,
                 float step_size, float inv_bc2, float b1, float omb1, float b2, float omb2,
                 float eps, bool vec) {
  constexpr int W = kChunk;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float gi[W], mi[W], vi[W], pi[W];
    load_chunk<W>(g + i, wide, count, gi);
    load_chunk<W>(m + i, wide, count, mi);
    load_chunk<W>(v + i, wide, count, vi);
    load_chunk<W>(p + i, wide, count, pi);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      mi[e] = b1 * mi[e] + omb1 * gi[e];
      vi[e] = b2 * vi[e] + omb2 * (gi[e] * gi[e]);
      pi[e] = pi[e] * decay - step_size * mi[e] / (sqrtf(vi[e] * inv_bc2) + eps);
    }
    store_chunk<W>(m + i, wide, count, mi);
    store_chunk<W>(v + i, wide, count, vi);
    store_chunk<W>(p + i, wide, count, pi);
  });
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, double lr,
                  double beta1, double beta2, double weight_decay, double eps, int64_t t,
                  cudaStream_t stream) {
  if (t < 1) cuda_fail(cudaErrorInvalidValue, "adamw_update: step count t must be >= 1",
                       __FILE__, __LINE__);
  if (n == 0) return;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  const bool vec = aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v);
  VT_LAUNCH(adamw_kernel, detail::elementwise_grid(n, kChunk, kBlocksPerSm), kThreads, 0, stream,
            p, g, m, v, n, static_cast<float>(1.0 - lr * weight_decay),
            static_cast<float>(lr / bc1), static_cast<float>(1.0 / bc2), static_cast<float>(beta1),
            static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
            static_cast<float>(1.0 - beta2), static_cast<float>(eps), vec);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
