// The attention op family: causal sliding-window attention with grouped-query heads, an optional
// fixed logit bias, and the shaped-attention / NeuTRENO mix on its output (semantics:
// cpu_kernels.h attention_* and attention_mix_*), forward and backward. Host kernels:
// cpu_attention.cc, cpu_attention_mix.cc; CUDA kernels: kernels/attention.cu (reference),
// kernels/attention_tc.cu (bf16 flash kernels on tensor cores, chosen by the CUDA runtime's
// setting wherever they apply), kernels/attention_mix.cu.
#pragma once
#include <cstdint>

#include "core/cpu_kernels.h"
#include "core/tensor.h"

namespace vt {

// The shaped-attention and NeuTRENO terms of one attention call (semantics: cpu_kernels.h,
// attention_mix_forward): per local query head alpha, beta, gamma (f32 (H,); undefined means
// alpha = 0, beta = 1, gamma = 0) and lam * (v1 - v) with v1 like v.
//
// E-SPA/U-SPA (--attn-bias, docs/model.md "Block shapes"): `rowscale` (f32 (T,), undefined: 1)
// is the location-dependent rescaling D[t] that multiplies the softmax and centring terms, and
// `centre_on_bias` makes the centring term the zero-query attention of the same call,
// softmax(bias) v under its window, instead of the uniform running mean (they agree without a
// bias); it needs the call's bias and gamma.
struct AttnMix {
  Tensor alpha, beta, gamma;
  float lam = 0.0f;
  Tensor v1;
  Tensor rowscale;
  bool centre_on_bias = false;
  bool active() const {
    return alpha.defined() || beta.defined() || gamma.defined() || lam != 0.0f ||
           rowscale.defined();
  }
};
// Gradients of the mix's own inputs: d alpha/beta/gamma (f32 (H,), accumulated +=, may be
// undefined) and d v1 (written =, may be undefined).
struct AttnMixGrads {
  Tensor dalpha, dbeta, dgamma, dv1;
};

namespace ops {

// The kernels' shape struct of q (B,T,H,hd) and k (B,T,Hkv,hd) (backends share it).
cpu::AttnShape attention_shape(const Tensor& q, const Tensor& k, int64_t window);
// What an attention call adds to plain softmax attention (all optional; docs/model.md "Block
// shapes"): a fixed logit bias (f32 (T, T)), and the mix of shaped attention / NeuTRENO
// (AttnMix). With an active mix, `soft` (like out) receives softmax attention's output, which
// the backward needs; out receives the mix.
struct AttnExtras {
  Tensor bias;
  AttnMix mix;
  Tensor soft;
};
// q (B,T,H,hd), k/v (B,T,Hkv,hd), out (B,T,H,hd), lse (B,H,T) f32.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, int64_t window, float scale, const AttnExtras& ex = {});
// The RoPE + QK-norm in front of the attention (ops::rope_rmsnorm of the saved pre-RoPE q and k,
// positions from 0), for a backward that returns the gradients of those pre-RoPE tensors (issue
// 29): on the tensor-core path the dQ and dK kernels end with it (kernels/attention_tc.cuh
// RopeNormGrad: the rotated, normalized gradients never go through memory); elsewhere
// rope_rmsnorm_backward runs after the attention's backward. The same bits either way.
struct AttnQkNormGrad {
  Tensor q, rstd_q;  // pre-RoPE q (B,T,H,hd) and its rstd (B*T*H) f32
  Tensor k, rstd_k;  // pre-RoPE k (B,T,Hkv,hd) and its rstd (B*T*Hkv) f32
  double base = 10000.0;
  float scale = 1.0f;
  bool active() const { return q.defined(); }
};
// dq, dk, dv written; with an active mix, g receives the mix's gradients (AttnMixGrads); with an
// active qk, dq and dk are those of qk's pre-RoPE q and k (AttnQkNormGrad).
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, int64_t window, float scale, const AttnExtras& ex = {},
                        const AttnMixGrads& g = {}, const AttnQkNormGrad& qk = {});

}  // namespace ops
}  // namespace vt
