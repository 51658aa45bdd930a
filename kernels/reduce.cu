// Reduction kernels (see reduce.cuh): one launch of up to kReduceBlocks blocks (fewer for short
// inputs: one block per kItemsPerBlock elements, so a 4k-element gradient does not launch 256k
// threads) each summing a grid-stride slice of chunks (8 bf16 or 4 f32, one 16-byte word where
// the inputs are 16-byte aligned, kernels/vec_access.cuh) in fp64 into partials[block]; the
// last block to finish sums the partials (no second launch: a step makes hundreds of these).
// The grid depends only on n and each thread sums the same
// chunks in the same order on both access paths, so results are deterministic and independent of
// the inputs' alignment.
#include "kernels/reduce.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::block_sum;
using detail::for_each_chunk;
using detail::kVec;
using detail::load_chunk;

constexpr int kThreads = 256;
constexpr int64_t kItemsPerBlock = 8 * kThreads;
static_assert(kReduceBlocks <= 8 * 132, "pass 1 is one wave of 8 blocks per SM on an H100");

int reduce_blocks(int64_t n) {
  const int64_t b = (n + kItemsPerBlock - 1) / kItemsPerBlock;
  return int(b < 1 ? 1 : (b > kReduceBlocks ? kReduceBlocks : b));
}

// y == nullptr: sum of x^2; else sum of x*y. The zeros that pad the last chunk add nothing.
// Each block writes its partial; the last block to count itself in (partials[kReduceBlocks] as
// a counter, after a fence that publishes the partial) adds them all in block order, as a
// separate final kernel would, writes *out and sets the counter back to zero.
template <class T>
__global__ void __launch_bounds__(kThreads, detail::kElementwiseBlocksPerSm)
    partial_kernel(const T* x, const T* y, int64_t n, double* partials, double* out,
                   bool accumulate, bool vec) {
  constexpr int W = kVec<T>;
  double acc = 0.0;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float a[W], b[W];
    load_chunk<W>(x + i, wide, count, a);
    if (y != nullptr) load_chunk<W>(y + i, wide, count, b);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const double ad = a[e];
      acc = fma(ad, y == nullptr ? ad : static_cast<double>(b[e]), acc);  // explicit: both paths
    }
  });
  acc = block_sum(acc);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = acc;
    __threadfence();
    unsigned* done = reinterpret_cast<unsigned*>(partials + kReduceBlocks);
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const volatile double* ps = partials;  // the other blocks' partials, not a stale cache line
  double total = 0.0;
  for (int i = threadIdx.x; i < static_cast<int>(gridDim.x); i += blockDim.x) total += ps[i];
  total = block_sum(total);
  if (threadIdx.x == 0) {
    *out = accumulate ? *out + total : total;
    *reinterpret_cast<unsigned*>(partials + kReduceBlocks) = 0u;
  }
}

template <class T>
void run(const T* x, const T* y, int64_t n, double* partials, double* out, bool accumulate,
         cudaStream_t stream) {
  // n == 0 still runs: the partial is zero and *out is written (=) or left (+=0).
  const int blocks = reduce_blocks(n);
  const bool vec = aligned16(x) && (y == nullptr || aligned16(y));
  VT_LAUNCH(partial_kernel<T>, blocks, kThreads, 0, stream, x, y, n, partials, out, accumulate,
            vec);
  VT_CUDA_CHECK_LAUNCH();
}

// Segment blockIdx.y of sum_squares_segments: partial_kernel's first half on x + y * n.
template <class T>
__global__ void __launch_bounds__(kThreads, detail::kElementwiseBlocksPerSm)
    segment_partial_kernel(const T* x, int64_t n, double* partials, bool vec) {
  constexpr int W = kVec<T>;
  const T* xs = x + static_cast<int64_t>(blockIdx.y) * n;
  double acc = 0.0;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float a[W];
    load_chunk<W>(xs + i, wide, count, a);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const double ad = a[e];
      acc = fma(ad, ad, acc);
    }
  });
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = acc;
}

// Block s adds segment s's `blocks` partials as partial_kernel's last block adds its grid's.
__global__ void __launch_bounds__(kThreads)
    segment_combine_kernel(const double* partials, int blocks, double* out) {
  const double* ps = partials + static_cast<int64_t>(blockIdx.x) * blocks;
  double total = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) total += ps[i];
  total = block_sum(total);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

}  // namespace

int64_t segment_partials(int64_t n) { return reduce_blocks(n); }

void sum_squares_segments(const float* x, int64_t n, int64_t segments, double* partials,
                          double* out, cudaStream_t stream) {
  VT_CUDA_REQUIRE(segments >= 1 && segments <= 65535, "sum_squares_segments: 1 to 65535 segments");
  const int blocks = reduce_blocks(n);
  // Every segment as aligned as the first (whole 16-byte words apart): the vector path for all,
  // as for each alone (either path gives the same sums).
  const bool vec = aligned16(x) && (n * int64_t(sizeof(float))) % 16 == 0;
  VT_LAUNCH(segment_partial_kernel<float>, dim3(unsigned(blocks), unsigned(segments)), kThreads,
            0, stream, x, n, partials, vec);
  VT_CUDA_CHECK_LAUNCH();
  VT_LAUNCH(segment_combine_kernel, unsigned(segments), kThreads, 0, stream, partials, blocks,
            out);
  VT_CUDA_CHECK_LAUNCH();
}

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
