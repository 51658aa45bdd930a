// Embedding gather / scatter-add kernels (see embedding.cuh): one thread per (n, c) element,
// grid-stride loops; the scatter uses fp32 atomicAdd (nondeterministic order for repeated ids).
#include "kernels/embedding.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"

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

template <class T>
__global__ void scatter_add_kernel(const T* dout, const int32_t* ids, int64_t N,
                                   int64_t row_begin, int64_t rows, int64_t C, float* dtable) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t r = static_cast<int64_t>(ids[n]) - row_begin;
    if (r >= 0 && r < rows) atomicAdd(dtable + r * C + c, to_f32(dout[i]));
  }
}

template <class T>
void gather(const float* table, int64_t row_begin, int64_t rows, int64_t C, const int32_t* ids,
            int64_t N, T* out, cudaStream_t stream) {
  if (N * C == 0) return;
  gather_kernel<T><<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(table, row_begin, rows, C,
                                                                       ids, N, out);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void scatter_add(const T* dout, const int32_t* ids, int64_t N, int64_t row_begin, int64_t rows,
                 int64_t C, float* dtable, cudaStream_t stream) {
  if (N * C == 0) return;
  scatter_add_kernel<T><<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(dout, ids, N,
                                                                             row_begin, rows, C,
                                                                             dtable);
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
