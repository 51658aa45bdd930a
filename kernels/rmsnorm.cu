// RMSNorm / QK-norm kernels and the residual add fused with RMSNorm (see rmsnorm.cuh): one block
// per row, fp32 block reductions.
#include "kernels/rmsnorm.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::block_sum;
using detail::from_f32;
using detail::to_f32;

constexpr int kMaxThreads = 256;

// Threads per row: the row width rounded up to a warp, at most kMaxThreads (a head-dim QK-norm
// row of 64 takes two warps, not eight idle ones).
unsigned threads_for(int64_t C) {
  const int64_t t = (C + 31) / 32 * 32;
  return unsigned(t < 32 ? 32 : (t > kMaxThreads ? kMaxThreads : t));
}

// The tail of both forward kernels: from the row's sum of squares `ss` (summed over the block),
// its rstd (written by thread 0) and y = x * scale * rstd.
template <class T>
__device__ void normalize_row(const T* xr, T* yr, float ss, float* rstd_r, int64_t C, float scale,
                              float eps) {
  const float rs = rsqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) *rstd_r = rs;
  const float f = scale * rs;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_f32<T>(to_f32(xr[c]) * f);
}

// Each element is read and written by the same thread, so y may alias x.
template <class T>
__global__ void rmsnorm_forward_kernel(const T* x, T* y, float* rstd, int64_t C, float scale,
                                       float eps) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  T* yr = y + r * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = to_f32(xr[c]);
    ss += v * v;
  }
  normalize_row(xr, yr, block_sum(ss), rstd + r, C, scale, eps);
}

// The sum x + y as a T tensor stores it (rounded once to T).
template <class T>
__device__ __forceinline__ float stored_sum(T x, T y) {
  return to_f32(from_f32<T>(to_f32(x) + to_f32(y)));
}

// The upstream gradient of element c: dy, or dy + dy2 as an axpy into dy would store it.
template <class T>
__device__ __forceinline__ float grad_at(const T* dyr, const T* dy2r, int64_t c) {
  return dy2r ? stored_sum(dyr[c], dy2r[c]) : to_f32(dyr[c]);
}

template <class T>
__global__ void rmsnorm_backward_kernel(const T* x, const float* rstd, const T* dy, const T* dy2,
                                        T* dx, int64_t C, float scale, bool accumulate) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  const T* dyr = dy + r * C;
  const T* dy2r = dy2 ? dy2 + r * C : nullptr;
  T* dxr = dx + r * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += grad_at(dyr, dy2r, c) * to_f32(xr[c]);
  dot = block_sum(dot);
  const float rs = rstd[r];
  const float a = scale * rs;
  const float b = rs * rs * dot / static_cast<float>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = a * (grad_at(dyr, dy2r, c) - to_f32(xr[c]) * b);
    if (accumulate) v += to_f32(dxr[c]);
    dxr[c] = from_f32<T>(v);
  }
}

// Each thread writes its elements of x (and keep) and reads them back after the row's sum:
// the rounded sums the norm must see, from the lines this thread just wrote (L1/L2, not HBM).
template <class T>
__global__ void add_rmsnorm_forward_kernel(T* x, const T* delta, T* keep, T* y, float* rstd,
                                           int64_t C, float scale, float eps) {
  const int64_t r = blockIdx.x;
  T* xr = x + r * C;
  const T* dr = delta + r * C;
  T* kr = keep ? keep + r * C : nullptr;
  T* yr = y + r * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const T s = from_f32<T>(to_f32(xr[c]) + to_f32(dr[c]));
    xr[c] = s;
    if (kr) kr[c] = s;
    const float v = to_f32(s);
    ss += v * v;
  }
  normalize_row(xr, yr, block_sum(ss), rstd + r, C, scale, eps);
}

template <class T>
void forward(const T* x, T* y, float* rstd, int64_t rows, int64_t C, float scale, float eps,
             cudaStream_t stream) {
  if (rows == 0) return;
  VT_LAUNCH(rmsnorm_forward_kernel<T>, static_cast<unsigned>(rows), threads_for(C), 0, stream, x, y,
            rstd, C, scale, eps);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward(const T* x, const float* rstd, const T* dy, const T* dy2, T* dx, int64_t rows,
              int64_t C, float scale, bool accumulate, cudaStream_t stream) {
  if (rows == 0) return;
  VT_LAUNCH(rmsnorm_backward_kernel<T>, static_cast<unsigned>(rows), threads_for(C), 0, stream, x,
            rstd, dy, dy2, dx, C, scale, accumulate);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void add_forward(T* x, const T* delta, T* keep, T* y, float* rstd, int64_t rows, int64_t C,
                 float scale, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  VT_LAUNCH(add_rmsnorm_forward_kernel<T>, static_cast<unsigned>(rows), threads_for(C), 0, stream,
            x, delta, keep, y, rstd, C, scale, eps);
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
