// RMSNorm / QK-norm kernels (see rmsnorm.cuh): one block per row, fp32 block reductions.
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
  ss = block_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  const float f = scale * rs;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_f32<T>(to_f32(xr[c]) * f);
}

template <class T>
__global__ void rmsnorm_backward_kernel(const T* x, const float* rstd, const T* dy, T* dx,
                                        int64_t C, float scale, bool accumulate) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  const T* dyr = dy + r * C;
  T* dxr = dx + r * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += to_f32(dyr[c]) * to_f32(xr[c]);
  dot = block_sum(dot);
  const float rs = rstd[r];
  const float a = scale * rs;
  const float b = rs * rs * dot / static_cast<float>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = a * (to_f32(dyr[c]) - to_f32(xr[c]) * b);
    if (accumulate) v += to_f32(dxr[c]);
    dxr[c] = from_f32<T>(v);
  }
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
void backward(const T* x, const float* rstd, const T* dy, T* dx, int64_t rows, int64_t C,
              float scale, bool accumulate, cudaStream_t stream) {
  if (rows == 0) return;
  VT_LAUNCH(rmsnorm_backward_kernel<T>, static_cast<unsigned>(rows), threads_for(C), 0, stream, x,
            rstd, dy, dx, C, scale, accumulate);
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
                      int64_t C, float scale, bool accumulate, cudaStream_t stream) {
  backward(x, rstd, dy, dx, rows, C, scale, accumulate, stream);
}
void rmsnorm_backward(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                      __nv_bfloat16* dx, int64_t rows, int64_t C, float scale, bool accumulate,
                      cudaStream_t stream) {
  backward(x, rstd, dy, dx, rows, C, scale, accumulate, stream);
}

}  // namespace vt::cuda
