// RMSNorm / QK-norm kernels and the residual add fused with RMSNorm (see rmsnorm.cuh): a team of
// threads per row (kernels/row_team.cuh: a block per wide row, 256 / G rows per block for short
// ones), chunks of 8 bf16 or 4 f32 moved in 16-byte words where every operand is 16-byte aligned
// and C a multiple of the chunk (kernels/vec_access.cuh; else the same chunks one element at a
// time), the row held in registers between its sum and its write (one chunk per thread up to
// 8192 bf16 / 4096 f32 columns): each operand read once and each result written once. fp32 sums
// in the team's fixed order, each product added with an explicit fmaf (what nvcc contracts the
// sum to anyway): the same bits on both access paths and in the fused and unfused kernels,
// whatever a compiler would choose for each instance.
#include "kernels/rmsnorm.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
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

// The row's rstd from its sum of squares (written by the team's thread 0) and y = x * scale *
// rstd from the row's chunks: slot 0 from registers (v), later ones read again from xr (which
// add_rmsnorm_forward has just written with the rounded sums).
template <class T, int W>
__device__ __forceinline__ void normalize_row(const RowPlace& p, const float (&v)[W], const T* xr,
                                              T* yr, float ss, float* rstd, int64_t C, int team,
                                              int64_t slots, float scale, float eps, bool vec) {
  const float rs = rsqrtf(ss / static_cast<float>(C) + eps);
  if (p.valid && p.t == 0) rstd[p.row] = rs;
  const float f = scale * rs;
  const auto write = [&](int64_t s, const float(&a)[W]) {
    float o[W];
#pragma unroll
    for (int e = 0; e < W; ++e) o[e] = a[e] * f;
    store_row<W>(yr, row_chunk(p, s, team, C, W), vec, o);
  };
  write(0, v);
#pragma unroll 1  // rows wider than 1024 chunks only
  for (int64_t s = 1; s < slots; ++s) {
    float a[W];
    load_row<W>(xr, row_chunk(p, s, team, C, W), vec, a);
    write(s, a);
  }
}

// Each element is read and written by the same thread, so y may alias x.
template <class T, bool vec, bool wide>
__global__ void __launch_bounds__(detail::kRowMaxTeam)
    rmsnorm_forward_kernel(const T* x, T* y, float* rstd, int64_t rows, int64_t C, int team,
                           int64_t slots, float scale, float eps) {
  constexpr int W = kVec<T>;
  const RowPlace p = row_place(rows, team);
  if (!wide) slots = 1;  // one chunk per thread: the loops over further slots drop out
  const int64_t off = p.valid ? p.row * C : 0;
  const T* xr = x + off;
  float ss = 0.0f;
  const auto square = [&](const float(&a)[W]) {
#pragma unroll
    for (int e = 0; e < W; ++e) ss = fmaf(a[e], a[e], ss);
  };
  float v[W];
  load_row<W>(xr, row_chunk(p, 0, team, C, W), vec, v);
  square(v);
#pragma unroll 1  // rows wider than 1024 chunks only
  for (int64_t s = 1; s < slots; ++s) {
    float a[W];
    load_row<W>(xr, row_chunk(p, s, team, C, W), vec, a);
    square(a);
  }
  normalize_row<T, W>(p, v, xr, y + off, team_sum(ss, team), rstd, C, team, slots, scale, eps,
                      vec);
}

// The upstream gradient of a chunk: dy, or dy + dy2 as an axpy into dy would store it (rounded
// once to T).
template <int W, class T>
__device__ __forceinline__ void load_grad(const T* dyr, const T* dy2r, RowChunk ch, bool vec,
                                          float (&g)[W]) {
  load_row<W>(dyr, ch, vec, g);
  if (dy2r != nullptr) {
    float g2[W];
    load_row<W>(dy2r, ch, vec, g2);
#pragma unroll
    for (int e = 0; e < W; ++e) g[e] = to_f32(from_f32<T>(g[e] + g2[e]));
  }
}

template <class T, bool vec, bool wide>
__global__ void __launch_bounds__(detail::kRowMaxTeam)
    rmsnorm_backward_kernel(const T* x, const float* rstd, const T* dy, const T* dy2, T* dx,
                            int64_t rows, int64_t C, int team, int64_t slots, float scale,
                            bool accumulate) {
  constexpr int W = kVec<T>;
  const RowPlace p = row_place(rows, team);
  if (!wide) slots = 1;  // one chunk per thread: the loops over further slots drop out
  const int64_t off = p.valid ? p.row * C : 0;
  const T* xr = x + off;
  const T* dyr = dy + off;
  const T* dy2r = dy2 != nullptr ? dy2 + off : nullptr;
  T* dxr = dx + off;
  float dot = 0.0f;
  const auto accumulate_dot = [&](const float(&xc)[W], const float(&gc)[W]) {
#pragma unroll
    for (int e = 0; e < W; ++e) dot = fmaf(gc[e], xc[e], dot);
  };
  float xv[W], gv[W];
  const RowChunk ch0 = row_chunk(p, 0, team, C, W);
  load_row<W>(xr, ch0, vec, xv);
  load_grad<W>(dyr, dy2r, ch0, vec, gv);
  accumulate_dot(xv, gv);
#pragma unroll 1  // rows wider than 1024 chunks only
  for (int64_t s = 1; s < slots; ++s) {
    const RowChunk ch = row_chunk(p, s, team, C, W);
    float xc[W], gc[W];
    load_row<W>(xr, ch, vec, xc);
    load_grad<W>(dyr, dy2r, ch, vec, gc);
    accumulate_dot(xc, gc);
  }
  dot = team_sum(dot, team);
  const float rs = p.valid ? rstd[p.row] : 0.0f;
  const float a = scale * rs;
  const float b = rs * rs * dot / static_cast<float>(C);
  // dx = a (g - x b) (+ dx). dx may alias dy: each chunk's dy is read before that chunk of dx is
  // written, by the same thread.
  const auto write = [&](RowChunk ch, const float(&xc)[W], const float(&gc)[W]) {
    float o[W];
#pragma unroll
    for (int e = 0; e < W; ++e) o[e] = a * (gc[e] - xc[e] * b);
    if (accumulate) {
      float old[W];
      load_row<W>(dxr, ch, vec, old);
#pragma unroll
      for (int e = 0; e < W; ++e) o[e] += old[e];
    }
    store_row<W>(dxr, ch, vec, o);
  };
  write(ch0, xv, gv);
#pragma unroll 1  // rows wider than 1024 chunks only
  for (int64_t s = 1; s < slots; ++s) {
    const RowChunk ch = row_chunk(p, s, team, C, W);
    float xc[W], gc[W];
    load_row<W>(xr, ch, vec, xc);
    load_grad<W>(dyr, dy2r, ch, vec, gc);
    write(ch, xc, gc);
  }
}

// x += delta (rounded to T), keep = the new x, then the norm of the new x as
// rmsnorm_forward_kernel computes it (the same plan, the same sums: bit for bit the unfused
// pair). Slots past the first are read back from x, which this thread has just written.
template <class T, bool vec, bool wide>
__global__ void __launch_bounds__(detail::kRowMaxTeam)
    add_rmsnorm_forward_kernel(T* x, const T* delta, T* keep, T* y, float* rstd, int64_t rows,
                               int64_t C, int team, int64_t slots, float scale, float eps) {
  constexpr int W = kVec<T>;
  const RowPlace p = row_place(rows, team);
  if (!wide) slots = 1;  // one chunk per thread: the loops over further slots drop out
  const int64_t off = p.valid ? p.row * C : 0;
  T* xr = x + off;
  const T* dr = delta + off;
  float ss = 0.0f;
  // Slot s's rounded sums into sum, x and keep; their squares into ss.
  const auto add = [&](int64_t s, float(&sum)[W]) {
    const RowChunk ch = row_chunk(p, s, team, C, W);
    float d[W];
    load_row<W>(xr, ch, vec, sum);
    load_row<W>(dr, ch, vec, d);
#pragma unroll
    for (int e = 0; e < W; ++e) sum[e] = to_f32(from_f32<T>(sum[e] + d[e]));
    store_row<W>(xr, ch, vec, sum);
    if (keep != nullptr) store_row<W>(keep + off, ch, vec, sum);
#pragma unroll
    for (int e = 0; e < W; ++e) ss = fmaf(sum[e], sum[e], ss);
  };
  float v[W];
  add(0, v);
#pragma unroll 1  // rows wider than 1024 chunks only
  for (int64_t s = 1; s < slots; ++s) {
    float a[W];
    add(s, a);
  }
  normalize_row<T, W>(p, v, xr, y + off, team_sum(ss, team), rstd, C, team, slots, scale, eps,
                      vec);
}

template <class T>
RowPlan plan(int64_t rows, int64_t C) {
  return detail::plan_rows(rows, C, kVec<T>);
}


template <class T>
void forward(const T* x, T* y, float* rstd, int64_t rows, int64_t C, float scale, float eps,
             cudaStream_t stream) {
  if (rows == 0) return;
  const RowPlan pl = plan<T>(rows, C);
  const bool vec = aligned16(x) && aligned16(y) && C % kVec<T> == 0;
  // The access path and whether rows need more than one chunk a thread are template arguments:
  // the common instances carry neither the scalar loads nor the loop over further chunks.
  const bool wide = pl.slots > 1;
  auto* kernel = vec ? (wide ? &rmsnorm_forward_kernel<T, true, true>
                             : &rmsnorm_forward_kernel<T, true, false>)
                     : (wide ? &rmsnorm_forward_kernel<T, false, true>
                             : &rmsnorm_forward_kernel<T, false, false>);
  VT_LAUNCH(kernel, pl.grid, pl.block, 0, stream, x, y, rstd, rows, C, pl.team, pl.slots, scale,
            eps);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward(const T* x, const float* rstd, const T* dy, const T* dy2, T* dx, int64_t rows,
              int64_t C, float scale, bool accumulate, cudaStream_t stream) {
  if (rows == 0) return;
  const RowPlan pl = plan<T>(rows, C);
  const bool vec = aligned16(x) && aligned16(dy) && (dy2 == nullptr || aligned16(dy2)) &&
                   aligned16(dx) && C % kVec<T> == 0;
  const bool wide = pl.slots > 1;
  auto* kernel = vec ? (wide ? &rmsnorm_backward_kernel<T, true, true>
                             : &rmsnorm_backward_kernel<T, true, false>)
                     : (wide ? &rmsnorm_backward_kernel<T, false, true>
                             : &rmsnorm_backward_kernel<T, false, false>);
  VT_LAUNCH(kernel, pl.grid, pl.block, 0, stream, x, rstd, dy, dy2, dx, rows, C, pl.team,
            pl.slots, scale, accumulate);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void add_forward(T* x, const T* delta, T* keep, T* y, float* rstd, int64_t rows, int64_t C,
                 float scale, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  const RowPlan pl = plan<T>(rows, C);
  const bool vec = aligned16(x) && aligned16(delta) && (keep == nullptr || aligned16(keep)) &&
                   aligned16(y) && C % kVec<T> == 0;
  const bool wide = pl.slots > 1;
  auto* kernel = vec ? (wide ? &add_rmsnorm_forward_kernel<T, true, true>
                             : &add_rmsnorm_forward_kernel<T, true, false>)
                     : (wide ? &add_rmsnorm_forward_kernel<T, false, true>
                             : &add_rmsnorm_forward_kernel<T, false, false>);
  VT_LAUNCH(kernel, pl.grid, pl.block, 0, stream, x, delta, keep, y, rstd, rows, C, pl.team,
            pl.slots, scale, eps);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(const float* x, float* y, float* rstd, int64_t rows, int64_t C, float scale,
                     float eps, cudaStream_t stream) {
  forward(x, y, rstd, rows, C, scale, eps, stream);
}
void rmsnorm_forward(const __nv_bfloat16* x, __nv_bfloat16* y, float* rstd, int64_t rows,
                     int64_t C, float scale, float eps, cudaStream_t stream) {
  forward(x, y, rstd, rows, C, scale, eps, stream);
}
void rmsnorm_backward(const float* x, const float* rstd, const float* dy, float* dx, int64_t rows,
                      int64_t C, float scale, bool accumulate, cudaStream_t stream,
                      const float* dy2) {
  backward(x, rstd, dy, dy2, dx, rows, C, scale, accumulate, stream);
}
void rmsnorm_backward(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                      __nv_bfloat16* dx, int64_t rows, int64_t C, float scale, bool accumulate,
                      cudaStream_t stream, const __nv_bfloat16* dy2) {
  backward(x, rstd, dy, dy2, dx, rows, C, scale, accumulate, stream);
}
void add_rmsnorm_forward(float* x, const float* delta, float* keep, float* y, float* rstd,
                         int64_t rows, int64_t C, float scale, float eps, cudaStream_t stream) {
  add_forward(x, delta, keep, y, rstd, rows, C, scale, eps, stream);
}
void add_rmsnorm_forward(__nv_bfloat16* x, const __nv_bfloat16* delta, __nv_bfloat16* keep,
                         __nv_bfloat16* y, float* rstd, int64_t rows, int64_t C, float scale,
                         float eps, cudaStream_t stream) {
  add_forward(x, delta, keep, y, rstd, rows, C, scale, eps, stream);
}

}  // namespace vt::cuda
