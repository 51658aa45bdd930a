// RoPE kernels (see rope.cuh): the table (one thread per (position, pair), double-precision
// angle, fp32 cos/sin) and the rotation (one thread per rotated pair, grid-stride loop, angles
// read from the table: one 8-byte load instead of exp2, cos and sin in double per element).
#include "kernels/rope.cuh"

#include <cmath>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

__global__ void rope_table_kernel(float2* table, int64_t n, int64_t half,
                                  double log2_base_over_half) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / half, j = i % half;
    // inv_freq_j = base^(-2j/hd) = 2^(-j * log2(base) / half)
    const double inv_freq = exp2(-static_cast<double>(j) * log2_base_over_half);
    const double angle = static_cast<double>(p) * inv_freq;
    table[i] = make_float2(static_cast<float>(cos(angle)), static_cast<float>(sin(angle)));
  }
}

template <class T>
__global__ void rope_kernel(const T* x, T* y, int64_t pairs, int64_t T_len, int64_t heads,
                            int64_t half, const float2* __restrict__ table, int64_t pos_offset,
                            float sign) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % half;
    const int64_t row = i / half;             // (b, t, h) flattened
    const int64_t t = (row / heads) % T_len;  // row = (b * T + t) * heads + h
    const float2 cs = table[(t + pos_offset) * half + j];
    const float c = cs.x, s = sign * cs.y;
    const int64_t o = row * 2 * half + j;
    const float a = to_f32(x[o]), b = to_f32(x[o + half]);
    y[o] = from_f32<T>(a * c - b * s);
    y[o + half] = from_f32<T>(b * c + a * s);
  }
}

void check_hd(int64_t hd) {
  if (hd % 2 != 0 || hd < 2)
    cuda_fail(cudaErrorInvalidValue, "rope: head dim must be even", __FILE__, __LINE__);
}

template <class T>
void apply(const T* x, T* y, int64_t B, int64_t Tn, int64_t heads, int64_t hd,
           const float2* table, int64_t pos_offset, float sign, cudaStream_t stream) {
  check_hd(hd);
  VT_CUDA_REQUIRE(pos_offset >= 0, "rope: position offset must be >= 0");
  const int64_t half = hd / 2, pairs = B * Tn * heads * half;
  if (pairs == 0) return;
  VT_LAUNCH(rope_kernel<T>, grid_for(pairs, kThreads), kThreads, 0, stream, x, y, pairs, Tn, heads,
            half, table, pos_offset, sign);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_table(float2* table, int64_t positions, int64_t hd, double base, cudaStream_t stream) {
  check_hd(hd);
  const int64_t half = hd / 2, n = positions * half;
  if (n == 0) return;
  VT_LAUNCH(rope_table_kernel, grid_for(n, kThreads), kThreads, 0, stream, table, n, half,
            std::log2(base) / static_cast<double>(half));
  VT_CUDA_CHECK_LAUNCH();
}

void rope_forward(const float* x, float* y, int64_t B, int64_t T, int64_t heads, int64_t hd,
                  const float2* table, int64_t pos_offset, cudaStream_t stream) {
  apply(x, y, B, T, heads, hd, table, pos_offset, 1.0f, stream);
}
void rope_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t B, int64_t T, int64_t heads,
                  int64_t hd, const float2* table, int64_t pos_offset, cudaStream_t stream) {
  apply(x, y, B, T, heads, hd, table, pos_offset, 1.0f, stream);
}
void rope_backward(const float* dy, float* dx, int64_t B, int64_t T, int64_t heads, int64_t hd,
                   const float2* table, int64_t pos_offset, cudaStream_t stream) {
  apply(dy, dx, B, T, heads, hd, table, pos_offset, -1.0f, stream);
}
void rope_backward(const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t B, int64_t T,
                   int64_t heads, int64_t hd, const float2* table, int64_t pos_offset,
                   cudaStream_t stream) {
  apply(dy, dx, B, T, heads, hd, table, pos_offset, -1.0f, stream);
}

}  // namespace vt::cuda
