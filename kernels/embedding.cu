// Embedding gather / scatter-add kernels (see embedding.cuh): the gather is a grid-stride loop
// over chunks of 8 (bf16 out: two 16-byte words of the f32 table, one of out) or 4 (f32) columns
// of one output row, moved in 16-byte words where table and out are 16-byte aligned and C a
// multiple of the chunk (kernels/vec_access.cuh; else one element at a time); the scatter-add
// gives every table element one owner thread that adds in id order (deterministic, bitwise equal
// to the CPU kernel).
#include "kernels/embedding.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::for_each_chunk;
using detail::from_f32;
using detail::kVec;
using detail::load_chunk;
using detail::store_chunk;
using detail::to_f32;

constexpr int kThreads = 256;

// out[n, c] = table[ids[n] - row_begin, c], 0 for ids outside [row_begin, row_begin + rows).
// On the 16-byte path (C % W == 0) a chunk lies in one output row and one table row.
template <class T>
__global__ void __launch_bounds__(kThreads, detail::kElementwiseBlocksPerSm)
    gather_kernel(const float* table, int64_t row_begin, int64_t rows, int64_t C,
                  const int32_t* ids, int64_t N, T* out, bool vec) {
  constexpr int W = kVec<T>;
  const auto source_row = [&](int64_t n) { return static_cast<int64_t>(ids[n]) - row_begin; };
  for_each_chunk<W>(N * C, vec, [&](int64_t i, bool wide, int count) {
    float v[W];
    if (wide) {
      const int64_t r = source_row(i / C);
      if (r >= 0 && r < rows) {
        load_chunk<W>(table + r * C + i % C, true, W, v);
      } else {
#pragma unroll
        for (int e = 0; e < W; ++e) v[e] = 0.0f;
      }
    } else {
#pragma unroll
      for (int e = 0; e < W; ++e) {
        v[e] = 0.0f;
        if (e < count) {
          const int64_t n = (i + e) / C, c = (i + e) % C, r = source_row(n);
          if (r >= 0 && r < rows) v[e] = table[r * C + c];
        }
      }
    }
    store_chunk<W>(out + i, wide, count, v);
  });
}

// Deterministic scatter-add: block (x, y) owns columns [x * kScatterCols, ...) of the table
// rows [y * rows_per_part, ...), so every dtable element has exactly one owner thread, which adds
// its contributions in id order n = 0..N-1: the CPU kernel's order, hence the same fp32 result
// bit for bit. The ids go through shared memory in tiles; each warp tests 32 ids at once (one
// per lane, __ballot_sync) and then walks only the ids its block owns, in ascending order, all
// lanes together on consecutive columns (no divergence, coalesced).
constexpr int kScatterCols = 128;  // threads per block = columns per block (whole warps)
constexpr int kIdTile = 2048;

template <class T>
__global__ void scatter_add_kernel(const T* dout, const int32_t* ids, int64_t N,
                                   int64_t row_begin, int64_t rows, int64_t C, float* dtable,
                                   int64_t rows_per_part) {
  __shared__ int32_t tile[kIdTile];
  const int lane = threadIdx.x & 31;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kScatterCols + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_part;
  const int64_t r1 = r0 + rows_per_part < rows ? r0 + rows_per_part : rows;
  for (int64_t base = 0; base < N; base += kIdTile) {
    const int count = static_cast<int>(N - base < kIdTile ? N - base : kIdTile);
    __syncthreads();  // the previous tile is no longer read
    for (int i = threadIdx.x; i < count; i += blockDim.x) tile[i] = ids[base + i];
    __syncthreads();
    for (int i0 = 0; i0 < count; i0 += 32) {
      const int i = i0 + lane;
      const int32_t id = i < count ? tile[i] : 0;
      const int64_t r = static_cast<int64_t>(id) - row_begin;
      unsigned owned = __ballot_sync(0xffffffffu, i < count && r >= r0 && r < r1);
      while (owned != 0u) {  // warp-uniform
        const int b = __ffs(static_cast<int>(owned)) - 1;  // lowest lane first: ascending n
        owned &= owned - 1u;
        const int64_t rb = static_cast<int64_t>(__shfl_sync(0xffffffffu, id, b)) - row_begin;
        if (c < C) dtable[rb * C + c] += to_f32(dout[(base + i0 + b) * C + c]);
      }
    }
  }
}

template <class T>
void gather(const float* table, int64_t row_begin, int64_t rows, int64_t C, const int32_t* ids,
            int64_t N, T* out, cudaStream_t stream) {
  if (N * C == 0) return;
  static_assert(kThreads == detail::kElementwiseThreads, "elementwise_grid sizes for this block");
  const bool vec = aligned16(table) && aligned16(out) && C % kVec<T> == 0;
  VT_LAUNCH(gather_kernel<T>, detail::elementwise_grid(N * C, kVec<T>), kThreads, 0, stream, table,
            row_begin, rows, C, ids, N, out, vec);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void scatter_add(const T* dout, const int32_t* ids, int64_t N, int64_t row_begin, int64_t rows,
                 int64_t C, float* dtable, cudaStream_t stream) {
  if (N == 0 || C == 0 || rows == 0) return;
  // Enough row partitions for ~2048 blocks in all (a few waves on any GPU); grid.y <= 65535.
  const int64_t col_blocks = (C + kScatterCols - 1) / kScatterCols;
  int64_t parts = (2048 + col_blocks - 1) / col_blocks;
  parts = parts < rows ? parts : rows;
  parts = parts < 65535 ? parts : 65535;
  const int64_t rows_per_part = (rows + parts - 1) / parts;
  parts = (rows + rows_per_part - 1) / rows_per_part;
  if (col_blocks > 0x7fffffff)
    cuda_fail(cudaErrorInvalidValue, "embedding_backward: too many columns", __FILE__, __LINE__);
  VT_LAUNCH(scatter_add_kernel<T>,
            dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(parts)), kScatterCols, 0,
            stream, dout, ids, N, row_begin, rows, C, dtable, rows_per_part);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(const float* table, int64_t row_begin, int64_t rows, int64_t C,
                       const int32_t* ids, int64_t N, float* out, cudaStream_t stream) {
  gather(table, row_begin, rows, C, ids, N, out, stream);
}
void embedding_forward(const float* table, int64_t row_begin, int64_t rows, int64_t C,
                       const int32_t* ids, int64_t N, __nv_bfloat16* out, cudaStream_t stream) {
  gather(table, row_begin, rows, C, ids, N, out, stream);
}
void embedding_backward(const float* dout, const int32_t* ids, int64_t N, int64_t row_begin,
                        int64_t rows, int64_t C, float* dtable, cudaStream_t stream) {
  scatter_add(dout, ids, N, row_begin, rows, C, dtable, stream);
}
void embedding_backward(const __nv_bfloat16* dout, const int32_t* ids, int64_t N,
                        int64_t row_begin, int64_t rows, int64_t C, float* dtable,
                        cudaStream_t stream) {
  scatter_add(dout, ids, N, row_begin, rows, C, dtable, stream);
}

}  // namespace vt::cuda
