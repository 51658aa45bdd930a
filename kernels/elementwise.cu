// Small elementwise kernels (see elementwise.cuh). The coefficient kernels and div_by_norm are
// grid-stride loops over chunks of 8 (bf16) or 4 (f32) elements moved in 16-byte words, the grid
// one wave of 256-thread blocks (kernels/vec_access.cuh; a scalar path for unaligned operands and
// the tail).
#include "kernels/elementwise.cuh"

#include <cstdint>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::for_each_chunk;
using detail::from_f32;
using detail::kVec;
using detail::load_chunk;
using detail::store_chunk;
using detail::to_f32;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = detail::kElementwiseBlocksPerSm;
static_assert(kThreads == detail::kElementwiseThreads, "elementwise_grid sizes for this block");

// y = a x, a = *coef.
template <class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    scale_copy_coef_kernel(const T* x, T* y, int64_t n, const float* coef, bool vec) {
  constexpr int W = kVec<T>;
  const float a = *coef;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float r[W];
    load_chunk<W>(x + i, wide, count, r);
#pragma unroll
    for (int e = 0; e < W; ++e) r[e] = a * r[e];
    store_chunk<W>(y + i, wide, count, r);
  });
}

// y += a x, a = *coef.
template <class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    axpy_coef_kernel(const T* x, T* y, int64_t n, const float* coef, bool vec) {
  constexpr int W = kVec<T>;
  const float a = *coef;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float r[W], t[W];
    load_chunk<W>(y + i, wide, count, r);
    load_chunk<W>(x + i, wide, count, t);
#pragma unroll
    for (int e = 0; e < W; ++e) r[e] = r[e] + a * t[e];
    store_chunk<W>(y + i, wide, count, r);
  });
}

__global__ void double_to_float_kernel(const double* src, float* dst) {
  *dst = static_cast<float>(*src);
}

// y = x / d, d = sqrt(*sumsq) * scale + eps, the division in double (a subroutine: the heavy
// register budget), the f32 quotient rounded to Out as the cast rounds. In place when y == x
// (each element read and written by one thread). Chunks of W: a 16-byte word of one type, or 8
// elements where f32 and bf16 mix (two f32 words, one bf16 word).
template <class In, class Out>
__global__ void __launch_bounds__(kThreads, detail::kHeavyBlocksPerSm)
    div_by_norm_kernel(const In* x, Out* y, int64_t n, const double* sumsq, double scale,
                       double eps, bool vec) {
  constexpr int W = sizeof(In) == sizeof(Out) ? kVec<In> : 8;
  const double d = sqrt(*sumsq) * scale + eps;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float r[W];
    load_chunk<W>(x + i, wide, count, r);
#pragma unroll
    for (int e = 0; e < W; ++e) r[e] = static_cast<float>(static_cast<double>(r[e]) / d);
    store_chunk<W>(y + i, wide, count, r);
  });
}

// div_by_norm_kernel on segment blockIdx.y (x and y offset by blockIdx.y * n, its own sum).
template <class In, class Out>
__global__ void __launch_bounds__(kThreads, detail::kHeavyBlocksPerSm)
    div_by_norm_segments_kernel(const In* x, Out* y, int64_t n, const double* sumsq, double scale,
                                double eps, bool vec) {
  constexpr int W = sizeof(In) == sizeof(Out) ? kVec<In> : 8;
  const int64_t base = static_cast<int64_t>(blockIdx.y) * n;
  const double d = sqrt(sumsq[blockIdx.y]) * scale + eps;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float r[W];
    load_chunk<W>(x + base + i, wide, count, r);
#pragma unroll
    for (int e = 0; e < W; ++e) r[e] = static_cast<float>(static_cast<double>(r[e]) / d);
    store_chunk<W>(y + base + i, wide, count, r);
  });
}

__global__ void add_scalar_kernel(float* t, int64_t index, float value) { t[index] += value; }

// Tiled transpose: a 32x32 tile of x is read with coalesced rows into shared memory (padded to
// 33 columns against bank conflicts) and written back as coalesced rows of y. Blocks of 32x8
// threads; grid-stride loops over the tiles in both directions (grid.y is capped at 65535).
constexpr int kTile = 32, kTileRows = 8;

template <class E>
__global__ void transpose_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t rows,
                                 int64_t cols) {
  __shared__ E tile[kTile][kTile + 1];
  x += static_cast<int64_t>(blockIdx.z) * rows * cols;  // matrix blockIdx.z of a batch
  y += static_cast<int64_t>(blockIdx.z) * rows * cols;
  const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles_r = (rows + kTile - 1) / kTile;
  for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    for (int64_t tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
      const int64_t r0 = tr * kTile, c0 = tc * kTile;
      for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        const int64_t r = r0 + j, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[j][threadIdx.x] = x[r * cols + c];
      }
      __syncthreads();
      // y row = x column c0 + j, y column = x row r0 + threadIdx.x.
      for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        const int64_t yr = c0 + j, yc = r0 + threadIdx.x;
        if (yr < cols && yc < rows) y[yr * rows + yc] = tile[threadIdx.x][j];
      }
      __syncthreads();  // the tile is reused by the next iteration
    }
  }
}

template <class T>
__global__ void scale_matrix_kernel(T* c, int64_t M, int64_t N, int64_t ldc, float beta) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T* e = c + (i / N) * ldc + (i % N);
    *e = beta == 0.0f ? from_f32<T>(0.0f) : from_f32<T>(beta * to_f32(*e));
  }
}

template <class E>
void transpose_impl(const E* x, E* y, int64_t rows, int64_t cols, cudaStream_t stream,
                    int64_t batch = 1) {
  if (rows == 0 || cols == 0 || batch == 0) return;
  VT_CUDA_REQUIRE(batch >= 1 && batch <= 65535, "transpose: a batch of 1 to 65535 matrices");
  const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles_r = (rows + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(tiles_c < 65535 * 16 ? tiles_c : 65535 * 16),
                  static_cast<unsigned>(tiles_r < 65535 ? tiles_r : 65535),
                  static_cast<unsigned>(batch));
  VT_LAUNCH(transpose_kernel<E>, grid, dim3(kTile, kTileRows), 0, stream, x, y, rows, cols);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void scale_matrix_impl(T* c, int64_t M, int64_t N, int64_t ldc, float beta, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  VT_LAUNCH(scale_matrix_kernel<T>, grid_for(M * N, kThreads), kThreads, 0, stream, c, M, N, ldc,
            beta);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void add_scalar(float* t, int64_t index, float value, cudaStream_t stream) {
  VT_LAUNCH(add_scalar_kernel, 1, 1, 0, stream, t, index, value);
  VT_CUDA_CHECK_LAUNCH();
}

// The transpose moves bits: bf16 as 16-bit words, f32 / i32 as 32-bit words.
void transpose_batched(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols,
                       cudaStream_t stream) {
  transpose_impl(reinterpret_cast<const uint32_t*>(x), reinterpret_cast<uint32_t*>(y), rows, cols,
                 stream, batch);
}
void transpose(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  transpose_impl(reinterpret_cast<const uint32_t*>(x), reinterpret_cast<uint32_t*>(y), rows, cols,
                 stream);
}
void transpose(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
               cudaStream_t stream) {
  transpose_impl(reinterpret_cast<const uint16_t*>(x), reinterpret_cast<uint16_t*>(y), rows, cols,
                 stream);
}
void transpose(const int32_t* x, int32_t* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  transpose_impl(reinterpret_cast<const uint32_t*>(x), reinterpret_cast<uint32_t*>(y), rows, cols,
                 stream);
}

void scale_matrix(float* c, int64_t M, int64_t N, int64_t ldc, float beta, cudaStream_t stream) {
  scale_matrix_impl(c, M, N, ldc, beta, stream);
}
void scale_matrix(__nv_bfloat16* c, int64_t M, int64_t N, int64_t ldc, float beta,
                  cudaStream_t stream) {
  scale_matrix_impl(c, M, N, ldc, beta, stream);
}

void scale_copy_coef(const float* x, float* y, int64_t n, const float* coef, cudaStream_t s) {
  if (n <= 0) return;
  VT_LAUNCH(scale_copy_coef_kernel<float>, detail::elementwise_grid(n, kVec<float>), kThreads, 0, s,
            x, y, n, coef, aligned16(x) && aligned16(y));
  VT_CUDA_CHECK_LAUNCH();
}
void scale_copy_coef(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, const float* coef,
                     cudaStream_t s) {
  if (n <= 0) return;
  VT_LAUNCH(scale_copy_coef_kernel<__nv_bfloat16>, detail::elementwise_grid(n, kVec<__nv_bfloat16>),
            kThreads, 0, s, x, y, n, coef, aligned16(x) && aligned16(y));
  VT_CUDA_CHECK_LAUNCH();
}
void axpy_coef(const float* x, float* y, int64_t n, const float* coef, cudaStream_t s) {
  if (n <= 0) return;
  VT_LAUNCH(axpy_coef_kernel<float>, detail::elementwise_grid(n, kVec<float>), kThreads, 0, s, x, y,
            n, coef, aligned16(x) && aligned16(y));
  VT_CUDA_CHECK_LAUNCH();
}
void axpy_coef(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, const float* coef,
               cudaStream_t s) {
  if (n <= 0) return;
  VT_LAUNCH(axpy_coef_kernel<__nv_bfloat16>, detail::elementwise_grid(n, kVec<__nv_bfloat16>),
            kThreads, 0, s, x, y, n, coef, aligned16(x) && aligned16(y));
  VT_CUDA_CHECK_LAUNCH();
}
void double_to_float(const double* src, float* dst, cudaStream_t s) {
  VT_LAUNCH(double_to_float_kernel, 1, 1, 0, s, src, dst);
  VT_CUDA_CHECK_LAUNCH();
}
template <class In, class Out>
void div_by_norm_launch(const In* x, Out* y, int64_t n, const double* sumsq, double scale,
                        double eps, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int W = sizeof(In) == sizeof(Out) ? kVec<In> : 8;
  auto* kernel = &div_by_norm_kernel<In, Out>;  // no comma in a macro argument
  VT_LAUNCH(kernel, detail::elementwise_grid(n, W, detail::kHeavyBlocksPerSm), kThreads, 0, s, x,
            y, n, sumsq, scale, eps, aligned16(x) && aligned16(y));
  VT_CUDA_CHECK_LAUNCH();
}

template <class Out>
void div_by_norm_segments_launch(const float* x, Out* y, int64_t n, int64_t segments,
                                 const double* sumsq, double scale, double eps, cudaStream_t s) {
  if (n <= 0 || segments <= 0) return;
  VT_CUDA_REQUIRE(segments <= 65535, "div_by_norm_segments: at most 65535 segments");
  constexpr int W = sizeof(float) == sizeof(Out) ? kVec<float> : 8;
  // Per segment the grid of one div_by_norm over n elements, whose blocks the segments share
  // (at most one wave in all would leave each segment a sliver of the GPU: chunk-to-thread
  // assignment does not change any element's value).
  const unsigned gx = detail::elementwise_grid(n, W, detail::kHeavyBlocksPerSm);
  const bool vec = aligned16(x) && aligned16(y) && (n * int64_t(sizeof(Out))) % 16 == 0 &&
                   (n * int64_t(sizeof(float))) % 16 == 0;
  auto* kernel = &div_by_norm_segments_kernel<float, Out>;  // no comma in a macro argument
  VT_LAUNCH(kernel, dim3(gx, unsigned(segments)), kThreads, 0, s, x, y, n, sumsq, scale, eps,
            vec);
  VT_CUDA_CHECK_LAUNCH();
}

void div_by_norm_segments(const float* x, float* y, int64_t n, int64_t segments,
                          const double* sumsq, double scale, double eps, cudaStream_t s) {
  div_by_norm_segments_launch(x, y, n, segments, sumsq, scale, eps, s);
}
void div_by_norm_segments(const float* x, __nv_bfloat16* y, int64_t n, int64_t segments,
                          const double* sumsq, double scale, double eps, cudaStream_t s) {
  div_by_norm_segments_launch(x, y, n, segments, sumsq, scale, eps, s);
}

void div_by_norm(float* x, int64_t n, const double* sumsq, double scale, double eps,
                 cudaStream_t s) {
  div_by_norm_launch(x, x, n, sumsq, scale, eps, s);
}
void div_by_norm(__nv_bfloat16* x, int64_t n, const double* sumsq, double scale, double eps,
                 cudaStream_t s) {
  div_by_norm_launch(x, x, n, sumsq, scale, eps, s);
}
void div_by_norm_to(const float* x, __nv_bfloat16* y, int64_t n, const double* sumsq, double scale,
                    double eps, cudaStream_t s) {
  div_by_norm_launch(x, y, n, sumsq, scale, eps, s);
}

}  // namespace vt::cuda
