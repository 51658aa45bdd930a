// Device-side helpers shared by the kernels (include only from .cu files): warp and block sums
// and maxima, and bf16/f32 load/store conversions so one kernel template serves both types.
// Maxima propagate NaN (nan_max), unlike fmaxf: a non-finite input must reach the loss.
#pragma once
#include <cuda_bf16.h>

namespace vt::cuda::detail {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// max(a, b) that returns NaN when either is NaN (fmaxf returns the other operand).
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// Contains __syncthreads: call from all threads of the block.
template <class A>
__device__ A block_sum(A v) {
  __shared__ A partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (blockDim.x <= 32) return v;  // one warp: done (the same for every thread of the block)
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  A t = lane < nwarps ? partial[lane] : A(0);
  return warp_sum(t);
}

__device__ inline float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (blockDim.x <= 32) return v;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? partial[lane] : -INFINITY;
  return warp_max(t);
}

}  // namespace vt::cuda::detail
