// Flash attention on tensor cores (bf16 mma.sync m16n8k16, fp32 accumulation): causal
// sliding-window GQA attention, forward and backward; host launchers.
//
// Same semantics, layouts and outputs as the reference kernels of kernels/attention.cuh (and
// vt::cpu::attention_forward/backward): query t sees key s iff s <= t and t - s < window; query
// head h reads KV head h / (H / Hkv); q (B,T,H,hd), k, v (B,T,Hkv,hd), out (B,T,H,hd) bf16, lse
// (B,H,T) fp32 natural-log sum-exp of each query row's scaled scores. Only bf16, and only head
// dims in attention_tc_supported (32, 64, 128; 128 is the fast path the tiles are sized for).
// Every bf16 pointer must be 16-byte aligned (rows move as 16-byte cp.async copies). The
// launchers enqueue on `stream` and return.
//
// Numerics differ from the reference (fp32 dot products of the bf16 inputs) by what tensor cores
// do: the probabilities P (forward) and P, dS (backward) are rounded to bf16 before they multiply
// V, dO, Q or K (2^-9 relative each); products are accumulated in fp32; the softmax statistics,
// lse and D stay fp32. The backward is deterministic (no atomics): dQ and dK/dV come from two
// kernels, each output tile has one owner and a fixed order. See docs/design.md
// ("Attention on tensor cores") for the tiling and what it costs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention.cuh"  // AttnShape

namespace vt::cuda {

// True when the tensor-core kernels handle this head dim (32, 64 or 128).
bool attention_tc_supported(const AttnShape& s);

void attention_tc_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                          __nv_bfloat16* out, float* lse, const AttnShape& s, float scale,
                          cudaStream_t stream);

// The forward kernel the 2026-11-26 GPU window measured (64-query blocks, 16 rows per warp; same
// semantics and outputs), kept so that tools/attention_bench times old and new in one call; the
// op never calls it. Tested against the CPU beside the forward (tests/gpu/attention_tc_test.cc).
void attention_tc_forward_v1(const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, __nv_bfloat16* out, float* lse,
                             const AttnShape& s, float scale, cudaStream_t stream);

// The backward kernels the 2026-11-26 GPU window measured (the same semantics and outputs, with
// the same workspace; no RoPE + QK-norm epilogue), kept, like the forward v1, only for
// tools/attention_bench and tested against the CPU beside the backward.
void attention_tc_backward_v1(const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const __nv_bfloat16* out, const float* lse,
                              const __nv_bfloat16* dout, __nv_bfloat16* dq, __nv_bfloat16* dk,
                              __nv_bfloat16* dv, const AttnShape& s, float scale, void* workspace,
                              cudaStream_t stream);

// Bytes of workspace attention_tc_backward needs (D = rowsum(dO * O), fp32, (B,H,T)).
size_t attention_tc_backward_workspace_bytes(const AttnShape& s);

// The RoPE + QK-norm that made the attention's q and k (kernels/rope.cuh rope_rmsnorm_forward),
// folded into the backward as the epilogue of the dQ and dK kernels (issue 29): with it, dq and dk
// are the gradients of the pre-RoPE q and k, bit for bit what rope_rmsnorm_backward would make of
// the plain dq and dk, without writing and reading those. Off when q.x is null.
struct RopeNormGrad {
  struct Side {
    const __nv_bfloat16* x = nullptr;  // the saved pre-RoPE q (B,T,H,hd) or k (B,T,Hkv,hd)
    const float* rstd = nullptr;       // its rstd per head vector, (B,T,heads)
  };
  Side q, k;
  const float2* table = nullptr;  // rope_table of this head dim and base, covering T + pos_offset
  int64_t pos_offset = 0;
  float scale = 1.0f;  // the QK-norm's scale
};

// Writes dq (B,T,H,hd), dk, dv (B,T,Hkv,hd) (=, not +=) given dout and the saved out/lse; with
// rn, dq and dk are those of the pre-RoPE q and k (RopeNormGrad).
void attention_tc_backward(const __nv_bfloat16* q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, const __nv_bfloat16* out, const float* lse,
                           const __nv_bfloat16* dout, __nv_bfloat16* dq, __nv_bfloat16* dk,
                           __nv_bfloat16* dv, const AttnShape& s, float scale, void* workspace,
                           cudaStream_t stream, const RopeNormGrad& rn = {});

}  // namespace vt::cuda
