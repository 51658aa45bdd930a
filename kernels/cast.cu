// f32 <-> bf16 cast kernels (see cast.cuh): elementwise, grid-stride loops.
#include "kernels/cast.cuh"

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void f32_to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

}  // namespace

void cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(f32_to_bf16_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  VT_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(bf16_to_f32_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
