// Reduction kernels (see reduce.cuh): pass 1 has up to kReduceBlocks blocks (fewer for short
// inputs: one block per kItemsPerBlock elements, so a 4k-element gradient does not launch 64k
// threads) each summing a grid-stride slice in fp64 into partials[block]; pass 2 is one block
// summing the partials. The grid depends only on n, so results are deterministic.
#include "kernels/reduce.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::block_sum;
using detail::to_f32;

constexpr int kThreads = 256;
constexpr int64_t kItemsPerBlock = 4 * kThreads;

int reduce_blocks(int64_t n) {
  const int64_t b = (n + kItemsPerBlock - 1) / kItemsPerBlock;
  return int(b < 1 ? 1 : (b > kReduceBlocks ? kReduceBlocks : b));
}

template <class T>
__device__ __forceinline__ double product(const T* x, const T* y, int64_t i) {
  const double a = to_f32(x[i]);
  return a * (y == nullptr ? a : static_cast<double>(to_f32(y[i])));
}

// y == nullptr: sum of x^2; else sum of x*y. Each thread keeps four grid strides' loads in flight
// (four independent accumulators: a single one would make every load wait for the previous
// iteration's add, one round trip to memory each), then its remainder; the four are combined in
// a fixed order, so the sum depends only on n and the grid.
template <class T>
__global__ void partial_kernel(const T* x, const T* y, int64_t n, double* partials) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] += product(x, y, i + u * stride);
  }
  for (; i < n; i += stride) acc[0] += product(x, y, i);
  double sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void final_kernel(const double* partials, int count, double* out, bool accumulate) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = accumulate ? *out + acc : acc;
}

template <class T>
void run(const T* x, const T* y, int64_t n, double* partials, double* out, bool accumulate,
         cudaStream_t stream) {
  // n == 0 still runs: the partial is zero and *out is written (=) or left (+=0).
  const int blocks = reduce_blocks(n);
  VT_LAUNCH(partial_kernel<T>, blocks, kThreads, 0, stream, x, y, n, partials);
  VT_CUDA_CHECK_LAUNCH();
  VT_LAUNCH(final_kernel, 1, kThreads, 0, stream, partials, blocks, out, accumulate);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sum_squares(const float* x, int64_t n, double* partials, double* out, bool accumulate,
                 cudaStream_t stream) {
  run<float>(x, nullptr, n, partials, out, accumulate, stream);
}
void sum_squares(const __nv_bfloat16* x, int64_t n, double* partials, double* out,
                 bool accumulate, cudaStream_t stream) {
  run<__nv_bfloat16>(x, nullptr, n, partials, out, accumulate, stream);
}
void dot(const float* x, const float* y, int64_t n, double* partials, double* out,
         bool accumulate, cudaStream_t stream) {
  run<float>(x, y, n, partials, out, accumulate, stream);
}
void dot(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, double* partials,
         double* out, bool accumulate, cudaStream_t stream) {
  run<__nv_bfloat16>(x, y, n, partials, out, accumulate, stream);
}

}  // namespace vt::cuda
