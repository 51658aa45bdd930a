// ReLU^2 and ReLU kernels (see activation.cuh): elementwise, grid-stride loops over chunks of 8
// elements (bf16: one 16-byte load per operand; f32: chunks of 4), the grid one wave of
// 256-thread blocks (kernels/vec_access.cuh); a scalar path for unaligned operands and the tail.
#include "kernels/activation.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::for_each_chunk;
using detail::kVec;
using detail::load_chunk;
using detail::store_chunk;

constexpr int kThreads = detail::kElementwiseThreads;
constexpr int kBlocksPerSm = detail::kElementwiseBlocksPerSm;

// The per-element formulas (the same on both paths).
__device__ __forceinline__ float relu2_of(float x) {
  const float r = x < 0.0f ? 0.0f : x;  // NaN passes (fmaxf would drop it)
  return r * r;
}
__device__ __forceinline__ float relu2_grad(float x, float dy) {
  const float r = x < 0.0f ? 0.0f : x;  // NaN passes (fmaxf would drop it)
  return 2.0f * r * dy;
}
__device__ __forceinline__ float relu_of(float x) { return x < 0.0f ? 0.0f : x; }  // NaN passes
__device__ __forceinline__ float relu_grad(float x, float dy) {
  return x > 0.0f ? dy : (x == x ? 0.0f : x);  // NaN passes
}

// y = f(x); Relu2: relu^2, else relu.
template <class T, bool kRelu2>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    act_forward_kernel(const T* x, T* y, int64_t n, bool vec) {
  constexpr int W = kVec<T>;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool v, int count) {
    float a[W];
    load_chunk<W>(x + i, v, count, a);
#pragma unroll
    for (int e = 0; e < W; ++e) a[e] = kRelu2 ? relu2_of(a[e]) : relu_of(a[e]);
    store_chunk<W>(y + i, v, count, a);
  });
}

// dx (= or += when accumulate) = f'(x) dy.
template <class T, bool kRelu2>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    act_backward_kernel(const T* x, const T* dy, T* dx, int64_t n, bool accumulate, bool vec) {
  constexpr int W = kVec<T>;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool v, int count) {
    float a[W], g[W];
    load_chunk<W>(x + i, v, count, a);
    load_chunk<W>(dy + i, v, count, g);
#pragma unroll
    for (int e = 0; e < W; ++e) g[e] = kRelu2 ? relu2_grad(a[e], g[e]) : relu_grad(a[e], g[e]);
    if (accumulate) {
      load_chunk<W>(dx + i, v, count, a);
#pragma unroll
      for (int e = 0; e < W; ++e) g[e] += a[e];
    }
    store_chunk<W>(dx + i, v, count, g);
  });
}

template <bool kRelu2, class T>
void forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(x) && aligned16(y);
  auto* kernel = &act_forward_kernel<T, kRelu2>;  // no comma in a macro argument
  VT_LAUNCH(kernel, detail::elementwise_grid(n, kVec<T>), kThreads, 0, stream, x, y, n, vec);
  VT_CUDA_CHECK_LAUNCH();
}

template <bool kRelu2, class T>
void backward(const T* x, const T* dy, T* dx, int64_t n, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(x) && aligned16(dy) && aligned16(dx);
  auto* kernel = &act_backward_kernel<T, kRelu2>;  // no comma in a macro argument
  VT_LAUNCH(kernel, detail::elementwise_grid(n, kVec<T>), kThreads, 0, stream, x, dy, dx, n,
            accumulate, vec);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void relu2_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  forward<true>(x, y, n, stream);
}
void relu2_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  forward<true>(x, y, n, stream);
}
void relu2_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                    cudaStream_t stream) {
  backward<true>(x, dy, dx, n, accumulate, stream);
}
void relu2_backward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t n,
                    bool accumulate, cudaStream_t stream) {
  backward<true>(x, dy, dx, n, accumulate, stream);
}
void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  forward<false>(x, y, n, stream);
}
void relu_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  forward<false>(x, y, n, stream);
}
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  backward<false>(x, dy, dx, n, accumulate, stream);
}
void relu_backward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t n,
                   bool accumulate, cudaStream_t stream) {
  backward<false>(x, dy, dx, n, accumulate, stream);
}

}  // namespace vt::cuda
