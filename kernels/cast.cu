// f32 <-> bf16 cast kernels (see cast.cuh): elementwise grid-stride loops over chunks of 8
// elements (one 16-byte bf16 word, two f32 words), the grid one wave of 256-thread blocks
// (kernels/vec_access.cuh); a scalar path for unaligned operands and the tail.
#include "kernels/cast.cuh"

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
constexpr int kBlocksPerSm = detail::kElementwiseBlocksPerSm;
constexpr int kChunk = 8;  // one bf16 word

// y = x converted (f32 -> bf16 rounds to nearest even; bf16 -> f32 is exact).
template <class From, class To>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    cast_kernel(const From* x, To* y, int64_t n, bool vec) {
  for_each_chunk<kChunk>(n, vec, [&](int64_t i, bool v, int count) {
    float a[kChunk];
    load_chunk<kChunk>(x + i, v, count, a);
    store_chunk<kChunk>(y + i, v, count, a);
  });
}

template <class From, class To>
void cast(const From* x, To* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  auto* kernel = &cast_kernel<From, To>;  // no comma in a macro argument
  VT_LAUNCH(kernel, detail::elementwise_grid(n, kChunk), kThreads, 0, stream, x, y, n,
            aligned16(x) && aligned16(y));
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  cast(x, y, n, stream);
}

void cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
  cast(x, y, n, stream);
}

}  // namespace vt::cuda
