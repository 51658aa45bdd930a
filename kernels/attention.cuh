// CUDA causal sliding-window GQA attention, forward and backward: host launchers of the reference
// kernels (scalar fp32 on CUDA cores, any head dim, f32 or bf16). The fast bf16 path is
// attention_tc.cuh (tensor cores).
//
// Same semantics and layouts as vt::cpu::attention_forward / attention_backward
// (src/core/cpu_kernels.h): query t sees key s iff 0 <= t - s < window; query head h reads KV
// head h / (H / Hkv); q (B,T,H,hd), k, v (B,T,Hkv,hd), out (B,T,H,hd), lse (B,H,T) natural-log
// sum-exp of the scaled scores of each query row. All pointers are device pointers; the
// launchers enqueue on `stream` and return (no synchronization).
//
// bias (optional): a fixed f32 (T, T) [query][key] bias added to the scaled scores (--attn-bias),
// shared by batch and heads.
//
// Two element types: float (everything fp32; used by the tests against the CPU reference) and
// bf16 (q, k, v, out, dout, dq, dk, dv in bf16). Both compute in fp32 (tiles are converted to
// fp32 in shared memory) and lse is always fp32.
//
// Backward is deterministic: dQ and dK/dV are computed by two separate kernels (the second
// loops over the query heads of a KV group and the query tiles that see its key tile, in a fixed
// order), so there are no atomics. It needs a workspace of
// attention_backward_workspace_bytes(s) bytes (D = rowsum(dO * O), fp32, (B,H,T)).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/cpu_kernels.h"  // vt::cpu::AttnShape

namespace vt::cuda {

using AttnShape = vt::cpu::AttnShape;

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttnShape& s, float scale, cudaStream_t stream,
                       const float* bias = nullptr);
void attention_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       __nv_bfloat16* out, float* lse, const AttnShape& s, float scale,
                       cudaStream_t stream, const float* bias = nullptr);

size_t attention_backward_workspace_bytes(const AttnShape& s);

// Writes dq (B,T,H,hd), dk, dv (B,T,Hkv,hd) (=, not +=) given dout and the saved out/lse.
void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv,
                        const AttnShape& s, float scale, void* workspace, cudaStream_t stream,
                        const float* bias = nullptr);
void attention_backward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* dout,
                        __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                        const AttnShape& s, float scale, void* workspace, cudaStream_t stream,
                        const float* bias = nullptr);

}  // namespace vt::cuda
