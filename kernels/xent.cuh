// Soft-capped, vocabulary-parallel cross-entropy on the GPU; same semantics as
// vt::cpu::xent_partial_forward / xent_backward (see cpu_kernels.h): logits (N, ld) of the local
// vocabulary slice whose column c is global id col_offset + c, first n_valid columns real,
// z = cap * tanh(logit / cap). Logits and dlogits are f32 or bf16 (fp32 math); the per-row
// statistics (row_max, row_sumexp, target_z, lse, loss, dloss) are always fp32. Device pointers
// (targets too).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// Per row n: row_max = max z, row_sumexp = sum exp(z - row_max), target_z = z at the target
// column if it is local and valid, else 0. The caller combines slices across ranks.
void xent_partial_forward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, float* row_max,
                          float* row_sumexp, float* target_z, cudaStream_t stream);
void xent_partial_forward(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, float* row_max,
                          float* row_sumexp, float* target_z, cudaStream_t stream);

// dlogits[n,c] = dloss[n] * (exp(z - lse[n]) - [global c == target]) * (1 - tanh^2(logit/cap))
// for valid columns, 0 for padding columns. Written (=).
void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   const float* dloss, float* dlogits, cudaStream_t stream);
// The same with one gradient scale for every row (dloss[n] = grad_scale), as the Backend's
// xent_backward takes it; every (logits, dlogits) dtype pair.
void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, float* dlogits, cudaStream_t stream);
void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, __nv_bfloat16* dlogits, cudaStream_t stream);
void xent_backward(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, float* dlogits, cudaStream_t stream);
void xent_backward(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, __nv_bfloat16* dlogits, cudaStream_t stream);

// The whole loss end in one kernel for a slice that holds the whole vocabulary (as
// vt::cpu::xent_loss_grad): per row lse, loss = lse - target_z, and dlogits = grad_scale *
// (exp(z - lse) - onehot) * (1 - tanh^2), padding columns 0. One block per row: an online max and
// sum of exp in one read of the row, then a second read (from cache) that writes the gradient.
// dlogits may be logits (in place, same type): the target's z is read before any write.
void xent_loss_grad(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, float* dlogits, cudaStream_t stream);
void xent_loss_grad(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, __nv_bfloat16* dlogits, cudaStream_t stream);
void xent_loss_grad(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, float* dlogits, cudaStream_t stream);
void xent_loss_grad(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, __nv_bfloat16* dlogits, cudaStream_t stream);

// Combining vocabulary slices (all (N) fp32, elementwise):
// row_sumexp[n] *= exp(row_max[n] - global_max[n]) (before the sum over slices).
void xent_rescale(float* row_sumexp, const float* row_max, const float* global_max, int64_t N,
                  cudaStream_t stream);
// lse[n] = row_max[n] + log(row_sumexp[n]); loss[n] = lse[n] - target_z[n].
void xent_finish(const float* row_max, const float* row_sumexp, const float* target_z,
                 float* lse, float* loss, int64_t N, cudaStream_t stream);

}  // namespace vt::cuda
