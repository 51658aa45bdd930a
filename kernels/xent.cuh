// Soft-capped, vocabulary-parallel cross-entropy on the GPU; same semantics as
// vt::cpu::xent_partial_forward / xent_backward (see cpu_kernels.h): logits (N, ld) of the local
// vocabulary slice whose column c is global id col_offset + c, first n_valid columns real,
// z = cap * tanh(logit / cap). fp32 logits and statistics. Device pointers (targets too).
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace vt::cuda {

// Per row n: row_max = max z, row_sumexp = sum exp(z - row_max), target_z = z at the target
// column if it is local and valid, else 0. The caller combines slices across ranks.
void xent_partial_forward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, float* row_max,
                          float* row_sumexp, float* target_z, cudaStream_t stream);

// dlogits[n,c] = dloss[n] * (exp(z - lse[n]) - [global c == target]) * (1 - tanh^2(logit/cap))
// for valid columns, 0 for padding columns. Written (=).
void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   const float* dloss, float* dlogits, cudaStream_t stream);

}  // namespace vt::cuda
