// The blocks' linear layers' GEMMs (W_Q, W_K, W_V, W_O, the MLP's fc and proj): bf16 (or f32)
// matmuls, or FP8 ones under --fp8 e4m3 (core/ops/gemm.h matmul_fp8: E4M3 activations and
// weights, E5M2 gradients, per-tensor current power-of-two scales, fp32 accumulation into the
// usual bf16/f32 outputs and the f32 weight gradients).
//
// What stays in bf16, and why:
//   - the lm head: its logits feed the softmax cross-entropy directly, over the vocabulary's
//     long tail, where E4M3's 3 mantissa bits would move the loss itself; nanochat, torchao's
//     recipes and Transformer Engine's guidance keep it in high precision;
//   - the embeddings and value tables (wte, bov, value embeds): row lookups, not GEMMs;
//   - attention (QK^T, PV): the attention kernels' own bf16 tensor-core MMAs, softmax between;
//   - the decode path (model/decode.cc): inference, not this recipe.
// The weights' codes are quantized once per optimizer step and reused by every micro-batch's
// forward and data-gradient GEMMs while the trainer's ops::Fp8WeightCacheScope is alive.
// The first block's projections are FP8 like every other block's (their inputs are
// RMS-normed like the rest; nothing in the FP8 formats paper's results singles them out).
#pragma once
#include "core/tensor.h"

namespace vt {
class GPT;

namespace linear {

// y (M,N) = x (M,K) @ w (K,N), or += when accumulate.
void forward(const GPT& m, const Tensor& x, const Tensor& w, const Tensor& y,
             bool accumulate = false);
// dx (M,K) = dy (M,N) @ w^T, or += when accumulate.
void backward_dx(const GPT& m, const Tensor& dy, const Tensor& w, const Tensor& dx,
                 bool accumulate);
// dw (K,N) += x^T @ dy.
void backward_dw(const GPT& m, const Tensor& x, const Tensor& dy, const Tensor& dw);
// The gradient of parameter `param` += x^T @ dy, or = on its first write of the step when the
// store defers its zeroing (ParamStore::take_first_write: beta = 0 instead of a zeroed arena).
void backward_dw(const GPT& m, const Tensor& x, const Tensor& dy, int param);

}  // namespace linear
}  // namespace vt
