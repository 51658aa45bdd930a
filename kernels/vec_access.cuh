// 16-byte memory access for the memory-bound kernels (include only from .cu files): chunks of W
// consecutive elements moved as W * sizeof(T) / 16 uint4 words (8 bf16 or 4 f32 a word) and
// converted to fp32 in registers, the same chunk read and written one scalar at a time where a
// pointer is not 16-byte aligned or the chunk is the short tail of a tensor or row, and the
// grid-stride loop over the chunks of an elementwise kernel.
//
// The scalar fallback keeps the chunk and its owner thread: a kernel computes the same values in
// the same order on both paths, so a reduction's result does not depend on the alignment of its
// operands (a view at an odd offset sums exactly as an aligned copy would).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"

namespace vt::cuda::detail {

// Elements of T in one 16-byte word: 8 bf16, 4 f32.
template <class T>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// Threads per block of the elementwise kernels and blocks of them per SM: 8 x 256 = 2048 threads,
// a full SM, when a kernel needs at most 32 registers (their __launch_bounds__ asks ptxas for
// that), so a grid of kElementwiseBlocksPerSm blocks per SM is one wave. Kernels whose math
// needs more registers (fp64 division, sqrt and division subroutines) ask for
// kHeavyBlocksPerSm (64 registers, 1024 threads an SM) and size their grid with it.
inline constexpr int kElementwiseThreads = 256;
inline constexpr int kElementwiseBlocksPerSm = 8;
inline constexpr int kHeavyBlocksPerSm = 4;

// Grid of an elementwise kernel over n elements in chunks of W: a block per 256 chunks, at most
// one wave (blocks_per_sm blocks per SM: the kernel's __launch_bounds__ minimum).
inline unsigned elementwise_grid(int64_t n, int W, int blocks_per_sm = kElementwiseBlocksPerSm) {
  return grid_for_sms((n + W - 1) / W, kElementwiseThreads, blocks_per_sm);
}

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// f[0..W) = the W elements at p, as fp32, in W * sizeof(T) / 16 loads of 16 bytes. p must be
// 16-byte aligned.
template <int W, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[W]) {
  static_assert((W * sizeof(T)) % 16 == 0, "a chunk is whole 16-byte words");
  constexpr int kWords = static_cast<int>(W * sizeof(T) / 16), kPer = kVec<T>;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    const uint4 u = reinterpret_cast<const uint4*>(p)[w];
    T e[kPer];
    __builtin_memcpy(static_cast<void*>(e), &u, sizeof(u));
#pragma unroll
    for (int k = 0; k < kPer; ++k) f[w * kPer + k] = to_f32(e[k]);
  }
}

// The W values of f rounded to T (nearest even for bf16) and stored at p in 16-byte words.
template <int W, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[W]) {
  static_assert((W * sizeof(T)) % 16 == 0, "a chunk is whole 16-byte words");
  constexpr int kWords = static_cast<int>(W * sizeof(T) / 16), kPer = kVec<T>;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    T e[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) e[k] = from_f32<T>(f[w * kPer + k]);
    uint4 u;
    __builtin_memcpy(&u, static_cast<const void*>(e), sizeof(u));
    reinterpret_cast<uint4*>(p)[w] = u;
  }
}

// The chunk at p: 16-byte loads when `vec` (then all W elements exist and p is aligned), else
// one load per element for the first n (n <= W) and 0 for the rest.
template <int W, class T>
__device__ __forceinline__ void load_chunk(const T* p, bool vec, int n, float (&f)[W]) {
  if (vec) {
    load_vec<W>(p, f);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = k < n ? to_f32(p[k]) : 0.0f;
  }
}

// The chunk's first n values (all W when `vec`) stored at p.
template <int W, class T>
__device__ __forceinline__ void store_chunk(T* p, bool vec, int n, const float (&f)[W]) {
  if (vec) {
    store_vec<W>(p, f);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k)
      if (k < n) p[k] = from_f32<T>(f[k]);
  }
}

// Grid-stride loop over the chunks of W elements of [0, n): body(i, vec, count) for the chunk
// starting at element i, with count = W except for the last, short chunk (count = n % W), which
// thread 0 of block 0 takes after its full ones. `vec`: every pointer the body accesses is
// 16-byte aligned (then each full chunk is moved in 16-byte words). Chunk q goes to thread
// q mod (grid threads) on both paths.
template <int W, class Body>
__device__ __forceinline__ void for_each_chunk(int64_t n, bool vec, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t full = n / W;
  if (vec) {
    for (int64_t q = tid; q < full; q += stride) body(q * W, true, W);
  } else {
    for (int64_t q = tid; q < full; q += stride) body(q * W, false, W);
  }
  if (tid == 0 && full * W < n) body(full * W, false, static_cast<int>(n - full * W));
}

}  // namespace vt::cuda::detail
