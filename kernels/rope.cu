// RoPE kernels (see rope.cuh): the table (one thread per (position, pair), double-precision
// angle, fp32 cos/sin); the rotation and the rotation fused with QK-norm's forward, a team of
// threads per head vector (kernels/row_team.cuh: hd 128 bf16 is 8 threads, 32 vectors a
// 256-thread block), each thread one chunk of 8 bf16 or 4 f32 pairs (j in the first half, j + hd/2
// in the second), moved in 16-byte words where the operands are aligned and hd/2 a multiple of
// the chunk (else the same chunks one element at a time), the angles read from the table in
// 16-byte words (no exp2, cos and sin in double per element), the norm's sum by shuffles inside
// the team; and the fused backward, one warp per head vector (kernels/rope_row.cuh, shared with
// the tensor-core attention backward's epilogue, which must give the same bits).
#include "kernels/rope.cuh"

#include <cmath>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/rope_row.cuh"
#include "kernels/row_team.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::from_f32;
using detail::kVec;
using detail::load_row;
using detail::row_chunk;
using detail::row_place;
using detail::RowChunk;
using detail::RowPlace;
using detail::RowPlan;
using detail::store_row;
using detail::team_sum;
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

// The (cos, sin) of the chunk's pairs from the table row `cs`: W / 2 16-byte words when `vec`
// (a constant in the kernels: the table 16-byte aligned and hd/2 a multiple of W, so a chunk is
// whole or empty), else one 8-byte load for each of the first n; zeros past them.
template <int W>
__device__ __forceinline__ void load_angles(const float2* cs, RowChunk ch, bool vec, float (&c)[W],
                                            float (&sn)[W]) {
  if (vec && ch.n == W) {
#pragma unroll
    for (int k = 0; k < W / 2; ++k) {
      const float4 q = reinterpret_cast<const float4*>(cs + ch.first)[k];
      c[2 * k] = q.x, sn[2 * k] = q.y, c[2 * k + 1] = q.z, sn[2 * k + 1] = q.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float2 q = !vec && e < ch.n ? cs[ch.first + e] : make_float2(0.0f, 0.0f);
      c[e] = q.x, sn[e] = q.y;
    }
  }
}

// Thread place, chunk and the table row of the vector's position, for the rotation kernels:
// vector `item` = (b * T + t) * heads + h of hd = 2 * half elements.
struct RopeChunk {
  RowPlace p;
  RowChunk ch;
  int64_t off;       // the vector's first element (0 when it does not exist)
  const float2* cs;  // its position's table row
};

__device__ __forceinline__ RopeChunk rope_chunk(int64_t items, int team, int64_t T_len,
                                                int64_t heads, int64_t half, int W,
                                                const float2* table, int64_t pos_offset) {
  RopeChunk r;
  r.p = row_place(items, team);
  r.ch = row_chunk(r.p, 0, team, half, W);
  r.off = r.p.valid ? r.p.row * 2 * half : 0;
  const int64_t t = r.p.valid ? (r.p.row / heads) % T_len : 0;
  r.cs = table + (t + pos_offset) * half;
  return r;
}

// The rotation alone (sign -1: the inverse, for the backward): y may alias x, each thread
// writing only the pairs it read. Slots past the first (`wide`) for vectors wider than the
// largest team.
template <class T, bool vec, bool wide>
__global__ void __launch_bounds__(detail::kRowMaxTeam)
    rope_kernel(const T* x, T* y, int64_t items, int64_t T_len, int64_t heads, int64_t half,
                int team, int64_t slots, const float2* __restrict__ table, int64_t pos_offset,
                float sign) {
  constexpr int W = kVec<T>;
  const RopeChunk r = rope_chunk(items, team, T_len, heads, half, W, table, pos_offset);
  if (!wide) slots = 1;  // one chunk per thread (hd <= 16384 bf16): the loop drops out
#pragma unroll 1
  for (int64_t s = 0; s < slots; ++s) {
    const RowChunk ch = row_chunk(r.p, s, team, half, W);
    if (ch.n == 0) return;  // no collectives here
    float a[W], b[W], c[W], sn[W];
    load_row<W>(x + r.off, ch, vec, a);
    load_row<W>(x + r.off + half, ch, vec, b);
    load_angles<W>(r.cs, ch, vec, c, sn);
    float ya[W], yb[W];
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float sv = sign * sn[e];
      ya[e] = a[e] * c[e] - b[e] * sv;
      yb[e] = b[e] * c[e] + a[e] * sv;
    }
    store_row<W>(y + r.off, ch, vec, ya);
    store_row<W>(y + r.off + half, ch, vec, yb);
  }
}

// The fused RoPE + QK-norm forward: the vector's chunks in registers between the team's sum of
// squares and the write; y may alias x (each thread writes only the pairs it read).
template <class T, bool vec>
__global__ void __launch_bounds__(detail::kRowMaxTeam)
    rope_rmsnorm_forward_kernel(const T* x, T* y, float* rstd, int64_t items, int64_t T_len,
                                int64_t heads, int64_t half, int team,
                                const float2* __restrict__ table, int64_t pos_offset, float scale,
                                float eps) {
  constexpr int W = kVec<T>;
  const RopeChunk r = rope_chunk(items, team, T_len, heads, half, W, table, pos_offset);
  float a[W], b[W];
  load_row<W>(x + r.off, r.ch, vec, a);
  load_row<W>(x + r.off + half, r.ch, vec, b);
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < W; ++e) ss = fmaf(b[e], b[e], fmaf(a[e], a[e], ss));  // see rmsnorm.cu
  ss = team_sum(ss, team);
  const float rs = rsqrtf(ss / static_cast<float>(2 * half) + eps);
  if (r.p.valid && r.p.t == 0) rstd[r.p.row] = rs;
  if (r.ch.n == 0) return;  // after the team's sum
  const float f = scale * rs;
  // The angles after the sum (an L2 read: the table is about 1 MiB at d24): loaded before it,
  // they would be live across it, 55 registers instead of 41 (4 blocks an SM instead of 5).
  float c[W], sn[W];
  load_angles<W>(r.cs, r.ch, vec, c, sn);
  float ya[W], yb[W];
#pragma unroll
  for (int e = 0; e < W; ++e) {
    ya[e] = (a[e] * c[e] - b[e] * sn[e]) * f;
    yb[e] = (b[e] * c[e] + a[e] * sn[e]) * f;
  }
  store_row<W>(y + r.off, r.ch, vec, ya);
  store_row<W>(y + r.off + half, r.ch, vec, yb);
}

// The fused backward: one warp per head vector, as the attention epilogue runs it.
constexpr int kFusedWarps = 8;  // vectors per block of 256 threads

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

// 16-byte words: x, y and the table aligned, and each vector's halves too (hd/2 a multiple of
// the chunk).
template <class T>
bool rope_vec(const T* x, const T* y, const float2* table, int64_t half) {
  return aligned16(x) && aligned16(y) && aligned16(table) && half % kVec<T> == 0;
}

template <class T>
void apply(const T* x, T* y, int64_t B, int64_t Tn, int64_t heads, int64_t hd,
           const float2* table, int64_t pos_offset, float sign, cudaStream_t stream) {
  check_hd(hd);
  VT_CUDA_REQUIRE(pos_offset >= 0, "rope: position offset must be >= 0");
  const int64_t items = B * Tn * heads, half = hd / 2;
  if (items == 0) return;
  const RowPlan pl = detail::plan_rows(items, half, kVec<T>);
  // The access path and the loop over further chunks are template arguments: the common
  // instance carries neither the scalar loads nor the loop.
  const bool vec = rope_vec(x, y, table, half), wide = pl.slots > 1;
  auto* kernel = vec ? (wide ? &rope_kernel<T, true, true> : &rope_kernel<T, true, false>)
                     : (wide ? &rope_kernel<T, false, true> : &rope_kernel<T, false, false>);
  VT_LAUNCH(kernel, pl.grid, pl.block, 0, stream, x, y, items, Tn, heads, half, pl.team, pl.slots,
            table, pos_offset, sign);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void fused_forward(const T* x, T* y, float* rstd, int64_t B, int64_t Tn, int64_t heads,
                   int64_t hd, const float2* table, int64_t pos_offset, float scale, float eps,
                   cudaStream_t stream) {
  check_hd(hd);
  VT_CUDA_REQUIRE(pos_offset >= 0, "rope_rmsnorm: position offset must be >= 0");
  VT_CUDA_REQUIRE(hd <= 512, "rope_rmsnorm: head dim must be <= 512");
  const int64_t items = B * Tn * heads, half = hd / 2;
  if (items == 0) return;
  // hd <= 512: at most 64 chunks of pairs, one per thread of a team of at most 64.
  const RowPlan pl = detail::plan_rows(items, half, kVec<T>);
  auto* kernel = rope_vec(x, y, table, half) ? &rope_rmsnorm_forward_kernel<T, true>
                                              : &rope_rmsnorm_forward_kernel<T, false>;
  VT_LAUNCH(kernel, pl.grid, pl.block, 0, stream, x, y, rstd, items, Tn, heads, half, pl.team,
            table, pos_offset, scale, eps);
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
