// Row-sharded embedding / value-table lookup on the GPU; same semantics as
// vt::cpu::embedding_forward/backward: the local table holds global rows
// [row_begin, row_begin + rows); ids outside that range gather zeros and scatter nothing.
// Device pointers (ids too).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// out[n,:] = table[ids[n] - row_begin, :] if owned, else 0. table (rows, C), out (N, C).
void embedding_forward(const float* table, int64_t row_begin, int64_t rows, int64_t C,
                       const int32_t* ids, int64_t N, float* out, cudaStream_t stream);
// bf16 output from the fp32 master table (the gathered rows feed bf16 activations).
void embedding_forward(const float* table, int64_t row_begin, int64_t rows, int64_t C,
                       const int32_t* ids, int64_t N, __nv_bfloat16* out, cudaStream_t stream);

// Scatter-add into the fp32 gradient table: dtable[ids[n] - row_begin, :] += dout[n, :] for
// owned ids. Deterministic: each element receives its contributions in id order n = 0..N-1,
// the order of the CPU kernel, so the fp32 result equals the CPU's bit for bit (no atomics).
// Each thread block reads all N ids, which costs O(N * blocks) cheap shared-memory reads.
void embedding_backward(const float* dout, const int32_t* ids, int64_t N, int64_t row_begin,
                        int64_t rows, int64_t C, float* dtable, cudaStream_t stream);
void embedding_backward(const __nv_bfloat16* dout, const int32_t* ids, int64_t N,
                        int64_t row_begin, int64_t rows, int64_t C, float* dtable,
                        cudaStream_t stream);

}  // namespace vt::cuda
