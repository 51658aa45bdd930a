// The thread layout of the row kernels (include only from .cu files): a team of threads per row
// of C elements, each thread owning chunks of W consecutive elements (kernels/vec_access.cuh)
// and holding the first of them in registers, so a row is read from memory once where it fits.
//
// Thread t of a team of G owns the row's chunks t, t + G, t + 2G, ... (its slots 0, 1, 2, ...);
// slot 0 is kept in registers between the row's sum and its write, later ones are read again
// (rows wider than 1024 chunks: 8192 bf16 or 4096 f32; a second slot in registers would spill
// the backward's under the 64 registers a 1024-thread block allows). Teams:
//   - G a power of two <= 32 (rows of at most 32 chunks: QK-norm's head rows, 128 bf16 = 16
//     chunks): 256 / G rows per 256-thread block, the row's sum by shuffles inside the team;
//   - G a multiple of 32 up to 1024 (wider rows: d24's 1536 bf16 = 192 chunks, one 16-byte load
//     per thread): one block per row, the sum by block_sum.
// The team's sum adds the threads' partial sums in a fixed tree, and each thread adds its own
// chunks in slot order, element order: a kernel's sums depend on C, W and K only (not on the
// alignment of its operands), so two kernels with the same plan sum a row the same way.
#pragma once
#include <cstdint>

#include "kernels/block_reduce.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda::detail {

inline constexpr int kRowBlock = 256;     // threads per block when a team is a warp or less
inline constexpr int kRowMaxTeam = 1024;  // threads per row at most (one block)

// How a row kernel is launched for rows of C elements in chunks of W.
struct RowPlan {
  int team = 1;       // G: threads per row
  int64_t slots = 0;  // chunks per thread: ceil(chunks / G)
  unsigned block = kRowBlock;
  unsigned grid = 1;
};

inline RowPlan plan_rows(int64_t rows, int64_t C, int W) {
  const int64_t chunks = (C + W - 1) / W;
  RowPlan p;
  if (chunks <= 32) {
    while (p.team < chunks) p.team <<= 1;
    p.block = kRowBlock;
  } else {
    const int64_t g = (chunks + 31) / 32 * 32;
    p.team = static_cast<int>(g < kRowMaxTeam ? g : kRowMaxTeam);
    p.block = static_cast<unsigned>(p.team);
  }
  p.slots = (chunks + p.team - 1) / p.team;
  const int64_t per_block = static_cast<int64_t>(p.block) / p.team;
  p.grid = static_cast<unsigned>((rows + per_block - 1) / per_block);
  return p;
}

// This thread's row, its index in the row's team, and whether the row exists (the last block of
// small teams may run past the end; its threads still take part in the team's shuffles).
struct RowPlace {
  int64_t row;
  int t;
  bool valid;
};

__device__ __forceinline__ RowPlace row_place(int64_t rows, int team) {
  if (team > 32) return {static_cast<int64_t>(blockIdx.x), static_cast<int>(threadIdx.x), true};
  const int per_block = static_cast<int>(blockDim.x) / team;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * per_block + threadIdx.x / team;
  return {row, static_cast<int>(threadIdx.x) % team, row < rows};
}

// This thread's slot s of its row: the chunk's first element and how many of its W elements
// lie in the row (0 past the row's end or when the row does not exist).
struct RowChunk {
  int64_t first;
  int n;
};

__device__ __forceinline__ RowChunk row_chunk(const RowPlace& p, int64_t s, int team, int64_t C,
                                              int W) {
  const int64_t c = (s * team + p.t) * W;
  if (!p.valid || c >= C) return {0, 0};
  return {c, C - c < W ? static_cast<int>(C - c) : W};
}

// The chunk of `row` as fp32 (zeros where it has no elements; nothing read for those). `vec`
// (a constant in the kernels): every operand 16-byte aligned and C a multiple of W, so a chunk is
// whole or empty and a whole one is one or two 16-byte words.
template <int W, class T>
__device__ __forceinline__ void load_row(const T* row, RowChunk ch, bool vec, float (&f)[W]) {
  if (vec && ch.n == W) {
    load_vec<W>(row + ch.first, f);
  } else if (vec) {
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = 0.0f;
  } else {
    load_chunk<W>(row + ch.first, false, ch.n, f);
  }
}

// The chunk's elements of f stored into `row`.
template <int W, class T>
__device__ __forceinline__ void store_row(T* row, RowChunk ch, bool vec, const float (&f)[W]) {
  if (vec && ch.n == W) {
    store_vec<W>(row + ch.first, f);
  } else if (!vec) {
    store_chunk<W>(row + ch.first, false, ch.n, f);
  }
}

// The sum of v over the row's team, in every thread of it. Every thread of the block calls it.
template <class A>
__device__ __forceinline__ A team_sum(A v, int team) {
  if (team > 32) return block_sum(v);
  for (int o = team >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace vt::cuda::detail
