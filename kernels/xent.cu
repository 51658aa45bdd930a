// Cross-entropy kernels (see xent.cuh). Forward: one block per row, two passes over the row
// (max of z, then sum of exp(z - max)) with fp32 block reductions; z is recomputed rather than
// stored. Backward: elementwise over (N, ld).
#include "kernels/xent.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"

namespace vt::cuda {
namespace {

using detail::block_max;
using detail::block_sum;

constexpr int kThreads = 256;

__global__ void xent_forward_kernel(const float* logits, int64_t ld, int64_t n_valid,
                                    int64_t col_offset, const int32_t* targets, float cap,
                                    float inv_cap, float* row_max, float* row_sumexp,
                                    float* target_z) {
  const int64_t n = blockIdx.x;
  const float* l = logits + n * ld;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < n_valid; c += blockDim.x)
    mx = fmaxf(mx, cap * tanhf(l[c] * inv_cap));
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < n_valid; c += blockDim.x)
    sum += expf(cap * tanhf(l[c] * inv_cap) - mx);
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    row_max[n] = mx;
    row_sumexp[n] = sum;
    const int64_t tc = static_cast<int64_t>(targets[n]) - col_offset;
    target_z[n] = (tc >= 0 && tc < n_valid) ? cap * tanhf(l[tc] * inv_cap) : 0.0f;
  }
}

__global__ void xent_backward_kernel(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                                     int64_t col_offset, const int32_t* targets, float cap,
                                     float inv_cap, const float* lse, const float* dloss,
                                     float* dlogits) {
  const int64_t total = N * ld;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / ld, c = i % ld;
    if (c >= n_valid) {
      dlogits[i] = 0.0f;
      continue;
    }
    const float th = tanhf(logits[i] * inv_cap);
    const float p = expf(cap * th - lse[n]);
    const bool is_target = static_cast<int64_t>(targets[n]) - col_offset == c;
    dlogits[i] = dloss[n] * (p - (is_target ? 1.0f : 0.0f)) * (1.0f - th * th);
  }
}

void check_args(int64_t ld, int64_t n_valid, float cap) {
  if (n_valid < 0 || n_valid > ld || !(cap > 0.0f))
    cuda_fail(cudaErrorInvalidValue, "xent: need 0 <= n_valid <= ld and cap > 0", __FILE__,
              __LINE__);
}

}  // namespace

void xent_partial_forward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, float* row_max,
                          float* row_sumexp, float* target_z, cudaStream_t stream) {
  check_args(ld, n_valid, cap);
  if (N == 0) return;
  xent_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
      logits, ld, n_valid, col_offset, targets, cap, 1.0f / cap, row_max, row_sumexp, target_z);
  VT_CUDA_CHECK_LAUNCH();
}

void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   const float* dloss, float* dlogits, cudaStream_t stream) {
  check_args(ld, n_valid, cap);
  if (N * ld == 0) return;
  xent_backward_kernel<<<grid_for(N * ld, kThreads), kThreads, 0, stream>>>(
      logits, N, ld, n_valid, col_offset, targets, cap, 1.0f / cap, lse, dloss, dlogits);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
