// Embedding gather / scatter-add kernels (see embedding.cuh): the gather is one thread per
// (n, c) element in a grid-stride loop; the scatter-add gives every table element one owner
// thread that adds in id order (deterministic, bitwise equal to the CPU kernel).
#include "kernels/embedding.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

template <class T>
__global__ void gather_kernel(const float* table, int64_t row_begin, int64_t rows, int64_t C,
                              const int32_t* ids, int64_t N, T* out) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t r = static_cast<int64_t>(ids[n]) - row_begin;
    out[i] = from_f32<T>((r >= 0 && r < rows) ? table[r * C + c] : 0.0f);
  }
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
  VT_LAUNCH(gather_kernel<T>, grid_for(N * C, kThreads), kThreads, 0, stream, table, row_begin,
            rows, C, ids, N, out);
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
