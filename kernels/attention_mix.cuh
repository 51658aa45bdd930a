// CUDA shaped-attention and NeuTRENO terms beside the attention kernel (attention.cuh): the
// same semantics as vt::cpu::attention_mix_forward / attention_mix_backward
// (src/core/cpu_kernels.h). For query head h of KV group g at position t:
//   out = D[t] (beta[h] * soft - gamma[h] * M[t,g]) + alpha[h] * v[t,g] + lam * (v1[t,g] - v[t,g])
// with M[t] the mean of v over the keys t sees (a running window sum, never a T x T matrix), or
// the caller's centring term, and D the rowscale (vt::cpu::MixSpa: E-SPA/U-SPA).
// alpha/beta/gamma are f32 (H,) device pointers or null (0, 1, 0). Device pointers; the
// launchers enqueue on `stream`. Deterministic: a thread owns a chunk of a (batch, KV head,
// channel) column's sequence, its window sums from fixed-order chunk sums; the per-head gain
// gradients are reduced in a fixed order from a workspace of attention_mix_workspace_bytes(s)
// bytes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/cpu_kernels.h"  // vt::cpu::AttnShape

namespace vt::cuda {

using AttnShape = vt::cpu::AttnShape;
template <class T>
using MixSpa = vt::cpu::MixSpa<T>;

// The most query heads one KV head may serve (H / Hkv) in these kernels.
constexpr int kMixMaxGroup = 16;

void attention_mix_forward(const float* soft, const float* v, const float* v1,
                           const float* alpha, const float* beta, const float* gamma, float lam,
                           float* out, const AttnShape& s, const MixSpa<float>& spa,
                           cudaStream_t stream);
void attention_mix_forward(const __nv_bfloat16* soft, const __nv_bfloat16* v,
                           const __nv_bfloat16* v1, const float* alpha, const float* beta,
                           const float* gamma, float lam, __nv_bfloat16* out, const AttnShape& s,
                           const MixSpa<__nv_bfloat16>& spa, cudaStream_t stream);

size_t attention_mix_workspace_bytes(const AttnShape& s);

// dsoft = D beta * dout (=); dv += the v terms; dalpha/dbeta/dgamma (+=, may be null); dv1 =
// lam * sum_h dout (=, may be null); spa.dcentre (= when spa.centre is given).
void attention_mix_backward(const float* dout, const float* soft, const float* v,
                            const float* alpha, const float* beta, const float* gamma, float lam,
                            float* dsoft, float* dv, float* dalpha, float* dbeta, float* dgamma,
                            float* dv1, const AttnShape& s, const MixSpa<float>& spa,
                            void* workspace, cudaStream_t stream);
void attention_mix_backward(const __nv_bfloat16* dout, const __nv_bfloat16* soft,
                            const __nv_bfloat16* v, const float* alpha, const float* beta,
                            const float* gamma, float lam, __nv_bfloat16* dsoft,
                            __nv_bfloat16* dv, float* dalpha, float* dbeta, float* dgamma,
                            __nv_bfloat16* dv1, const AttnShape& s,
                            const MixSpa<__nv_bfloat16>& spa, void* workspace,
                            cudaStream_t stream);

}  // namespace vt::cuda
