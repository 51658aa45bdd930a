// ReLU^2 and ReLU kernels (see activation.cuh): elementwise, grid-stride loops.
#include "kernels/activation.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

template <class T>
__global__ void relu2_forward_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = to_f32(x[i]);
    const float r = xi < 0.0f ? 0.0f : xi;  // NaN passes (fmaxf would drop it)
    y[i] = from_f32<T>(r * r);
  }
}

template <class T>
__global__ void relu2_backward_kernel(const T* x, const T* dy, T* dx, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = to_f32(x[i]);
    const float r = xi < 0.0f ? 0.0f : xi;  // NaN passes (fmaxf would drop it)
    float v = 2.0f * r * to_f32(dy[i]);
    if (accumulate) v += to_f32(dx[i]);
    dx[i] = from_f32<T>(v);
  }
}

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = to_f32(x[i]);
    y[i] = from_f32<T>(xi < 0.0f ? 0.0f : xi);  // NaN passes
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = to_f32(x[i]);
    float v = xi > 0.0f ? to_f32(dy[i]) : (xi == xi ? 0.0f : xi);  // NaN passes
    if (accumulate) v += to_f32(dx[i]);
    dx[i] = from_f32<T>(v);
  }
}

template <class T>
void forward_relu(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(relu_forward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward_relu(const T* x, const T* dy, T* dx, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(relu_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, x, dy, dx, n,
            accumulate);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(relu2_forward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward(const T* x, const T* dy, T* dx, int64_t n, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(relu2_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, x, dy, dx, n,
            accumulate);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void relu2_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  forward(x, y, n, stream);
}
void relu2_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  forward(x, y, n, stream);
}
void relu2_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                    cudaStream_t stream) {
  backward(x, dy, dx, n, accumulate, stream);
}
void relu2_backward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t n,
                    bool accumulate, cudaStream_t stream) {
  backward(x, dy, dx, n, accumulate, stream);
}
void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  forward_relu(x, y, n, stream);
}
void relu_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  forward_relu(x, y, n, stream);
}
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  backward_relu(x, dy, dx, n, accumulate, stream);
}
void relu_backward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t n,
                   bool accumulate, cudaStream_t stream) {
  backward_relu(x, dy, dx, n, accumulate, stream);
}

}  // namespace vt::cuda
