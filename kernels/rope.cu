// RoPE kernels (see rope.cuh): the table (one thread per (position, pair), double-precision
// angle, fp32 cos/sin), the rotation (one thread per rotated pair, grid-stride loop, angles
// read from the table: one 8-byte load instead of exp2, cos and sin in double per element), and
// the rotation fused with QK-norm (one warp per head vector, warp-shuffle sums).
#include "kernels/rope.cuh"

#include <cmath>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/rope_row.cuh"

namespace vt::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
using detail::warp_sum;

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

// The fused RoPE + QK-norm: warp w of a block takes vector `item` = blockIdx.x * warps + w
// (vector = one (b, t, head) row of hd values); lane l holds pairs j = l + 32 i, i < kPer
// (kPer = ceil(hd / 64), so hd <= 64 kPer), in registers between the warp's sum and the write.
// A whole warp leaves together when item is past the end, so the full-mask shuffles of
// warp_sum always see all 32 lanes.
constexpr int kFusedWarps = 8;  // vectors per block of 256 threads

template <class T, int kPer>
__global__ void rope_rmsnorm_forward_kernel(const T* x, T* y, float* rstd, int64_t items,
                                            int64_t T_len, int64_t heads, int64_t half,
                                            const float2* __restrict__ table, int64_t pos_offset,
                                            float scale, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kFusedWarps + (threadIdx.x >> 5);
  if (item >= items) return;
  const int64_t t = (item / heads) % T_len;  // item = (b * T + t) * heads + h
  const float2* cs = table + (t + pos_offset) * half;
  const T* xr = x + item * 2 * half;
  T* yr = y + item * 2 * half;
  float a[kPer], b[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t j = lane + 32 * i;
    a[i] = b[i] = 0.0f;
    if (j < half) {
      a[i] = to_f32(xr[j]);
      b[i] = to_f32(xr[j + half]);
      ss += a[i] * a[i] + b[i] * b[i];
    }
  }
  ss = warp_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(2 * half) + eps);
  if (lane == 0) rstd[item] = rs;
  const float f = scale * rs;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < half) {
      const float2 c = cs[j];
      yr[j] = from_f32<T>((a[i] * c.x - b[i] * c.y) * f);
      yr[j + half] = from_f32<T>((b[i] * c.x + a[i] * c.y) * f);
    }
  }
}

template <class T, int kPer>
__global__ void rope_rmsnorm_backward_kernel(const T* x, const float* rstd, const T* dy, T* dx,
                                             int64_t items, int64_t T_len, int64_t heads,
                                             int64_t half, const float2* __restrict__ table,
                                             int64_t pos_offset, float scale) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kFusedWarps + (threadIdx.x >> 5);
  if (item >= items) return;
  const int64_t t = (item / heads) % T_len;
  const int64_t o = item * 2 * half;
  detail::rope_rmsnorm_backward_row<kPer>(
      x + o, rstd[item], table + (t + pos_offset) * half, half, scale,
      [&](int64_t j) { return to_f32(dy[o + j]); },
      [&](int64_t j, float v) { dx[o + j] = from_f32<T>(v); });
}

// Pairs per lane for a head dim: 1, 2, 4 or 8 (hd <= 64, 128, 256, 512).
int pairs_per_lane(int64_t hd) {
  VT_CUDA_REQUIRE(hd <= 512, "rope_rmsnorm: head dim must be <= 512");
  return hd <= 64 ? 1 : hd <= 128 ? 2 : hd <= 256 ? 4 : 8;
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

template <class T>
void fused_forward(const T* x, T* y, float* rstd, int64_t B, int64_t Tn, int64_t heads,
                   int64_t hd, const float2* table, int64_t pos_offset, float scale, float eps,
                   cudaStream_t stream) {
  check_hd(hd);
  VT_CUDA_REQUIRE(pos_offset >= 0, "rope_rmsnorm: position offset must be >= 0");
  const int64_t items = B * Tn * heads, half = hd / 2;
  if (items == 0) return;
  const unsigned grid = static_cast<unsigned>((items + kFusedWarps - 1) / kFusedWarps);
  const unsigned threads = 32 * kFusedWarps;
  // One launch through a pointer (no comma in a macro argument): the kernel for the pairs per lane.
  auto* kernel = &rope_rmsnorm_forward_kernel<T, 8>;
  switch (pairs_per_lane(hd)) {
    case 1: kernel = &rope_rmsnorm_forward_kernel<T, 1>; break;
    case 2: kernel = &rope_rmsnorm_forward_kernel<T, 2>; break;
    case 4: kernel = &rope_rmsnorm_forward_kernel<T, 4>; break;
    default: break;
  }
  VT_LAUNCH(kernel, grid, threads, 0, stream, x, y, rstd, items, Tn, heads, half, table,
            pos_offset, scale, eps);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void fused_backward(const T* x, const float* rstd, const T* dy, T* dx, int64_t B, int64_t Tn,
                    int64_t heads, int64_t hd, const float2* table, int64_t pos_offset,
                    float scale, cudaStream_t stream) {
  check_hd(hd);
  VT_CUDA_REQUIRE(pos_offset >= 0, "rope_rmsnorm: position offset must be >= 0");
  const int64_t items = B * Tn * heads, half = hd / 2;
  if (items == 0) return;
  const unsigned grid = static_cast<unsigned>((items + kFusedWarps - 1) / kFusedWarps);
  const unsigned threads = 32 * kFusedWarps;
  auto* kernel = &rope_rmsnorm_backward_kernel<T, 8>;
  switch (pairs_per_lane(hd)) {
    case 1: kernel = &rope_rmsnorm_backward_kernel<T, 1>; break;
    case 2: kernel = &rope_rmsnorm_backward_kernel<T, 2>; break;
    case 4: kernel = &rope_rmsnorm_backward_kernel<T, 4>; break;
    default: break;
  }
  VT_LAUNCH(kernel, grid, threads, 0, stream, x, rstd, dy, dx, items, Tn, heads, half, table,
            pos_offset, scale);
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

void rope_rmsnorm_forward(const float* x, float* y, float* rstd, int64_t B, int64_t T,
                          int64_t heads, int64_t hd, const float2* table, int64_t pos_offset,
                          float scale, float eps, cudaStream_t stream) {
  fused_forward(x, y, rstd, B, T, heads, hd, table, pos_offset, scale, eps, stream);
}
void rope_rmsnorm_forward(const __nv_bfloat16* x, __nv_bfloat16* y, float* rstd, int64_t B,
                          int64_t T, int64_t heads, int64_t hd, const float2* table,
                          int64_t pos_offset, float scale, float eps, cudaStream_t stream) {
  fused_forward(x, y, rstd, B, T, heads, hd, table, pos_offset, scale, eps, stream);
}
void rope_rmsnorm_backward(const float* x, const float* rstd, const float* dy, float* dx,
                           int64_t B, int64_t T, int64_t heads, int64_t hd, const float2* table,
                           int64_t pos_offset, float scale, cudaStream_t stream) {
  fused_backward(x, rstd, dy, dx, B, T, heads, hd, table, pos_offset, scale, stream);
}
void rope_rmsnorm_backward(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                           __nv_bfloat16* dx, int64_t B, int64_t T, int64_t heads, int64_t hd,
                           const float2* table, int64_t pos_offset, float scale,
                           cudaStream_t stream) {
  fused_backward(x, rstd, dy, dx, B, T, heads, hd, table, pos_offset, scale, stream);
}

}  // namespace vt::cuda
