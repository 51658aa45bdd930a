// The structs a pass of the model shares between GPT (gpt.h), the block shapes (block_shape.h,
// blocks/), the kits (block_kit.h, train_kit.h, decode.cc) and the projections (projection.h):
// a layer's parameter indices (LayerParams, Projection), what crosses a pipeline-stage boundary
// (Bundle), and what a forward saves for its backward (NormActs, BlockActs, Activations).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/smear_gate.h"
#include "model/value_path.h"

namespace vt {

// W_V or W_O of a layer: y = x W (a matrix), y = s x (the identity, times a gain s when skip
// is set; skip = -1: the plain identity), or
// y = x (s W0 + r dW) (reparameterized: W0 fixed, the identity or orthogonal; dW trained).
struct Projection {
  enum class Kind { kNone, kMatrix, kIdentity, kReparam };
  Kind kind = Kind::kNone;
  int w = -1;      // the matrix (kMatrix) or dW (kReparam)
  int skip = -1;   // s (kIdentity, kReparam)
  int resid = -1;  // r (kReparam)
  Tensor base;     // kReparam: this rank's slice of W0 (f32, the model's device; not trained)
  bool defined() const { return kind != Kind::kNone; }
};

// Parameter indices (into the ParamStore) of one layer; -1 where absent.
struct LayerParams {
  int wq = -1, wk = -1, fc = -1, proj = -1;
  Projection v, o;
  int alpha = -1, beta = -1, gamma = -1;            // shaped attention gains (per head)
  int attn_gain = -1, mlp_gain = -1, mlp_skip = -1;  // block gains
  int dwa = -1;                                      // DenseFormer weights after this block
  ValueLayerParams value;                            // the value mode's
};

// What crosses a pipeline-stage boundary going forward (or, in backward, its gradient).
struct Bundle {
  Tensor x;                    // (B, T, C) residual stream
  Tensor x0;                   // (B, T, C) normalized embedding, when the mode reads it
  std::vector<Tensor> values;  // [j] = layer j's context value (B, T, Hkv_local*hd) when read later
  std::vector<Tensor> dense;   // [j] = DenseFormer input x_j (B, T, C) when a later average reads it
};

// A norm's saved state: input, rstd, output. `on` false: the identity (n = x), nothing saved.
struct NormActs {
  bool on = true;
  Tensor x, rstd, n;
};

// Everything one layer saves in forward for its backward.
struct BlockActs {
  Tensor x_in;                          // block input (all a recomputation needs)
  NormActs norm1, norm2;                // attention (or shared) input norm; MLP input norm
  // q and k as kept for the backward: before RoPE under QK-norm (ops::rope_rmsnorm rotates and
  // normalizes in one pass), after RoPE without it; then after QK-norm (with its rstd).
  Tensor q, k, qn, kn, rstd_q, rstd_k;
  Tensor attn_in, mlp_in;               // the sub-layers' (normalized) inputs
  Tensor ctx_v;                         // context value (V projection of n, or of x0 for x0v)
  Tensor x0n, x0n_rstd;                 // norm(x0) and its rstd (ModelConfig::value_renorms_x0)
  ValueState value;                     // what the value mode keeps
  Tensor v, y, y_soft, lse;             // mixed value, attention output (and its softmax part)
  Tensor attn_out, mlp_out;             // sub-layer outputs (N, C) when a gain multiplies them
  Tensor mlp_skip_in;                   // the stream the MLP skip gain multiplies
  Tensor h, act;                        // MLP pre-activation, relu^2
};

// The saved state of one micro-batch's forward pass on this stage.
struct Activations {
  int B = 0;
  int chunk = 0;                         // the model chunk (virtual stage) this pass ran
  std::vector<int32_t> inputs, targets;  // (B*T) on the host
  Tensor input_ids, target_ids;          // the same on the model's device (i32)
  Tensor table_ids;                      // inputs as compact ids into the pass's TableRows
  Tensor emb_raw, emb_rstd;              // wte rows before norm, norm's rstd (first stage)
  smear::Acts smear;                     // --smear-gate on (first stage)
  std::vector<BlockActs> blocks;         // indexed by layer - chunk_begin(chunk)
  Tensor head_x, head_rstd, head_n;      // final residual, its norm (last stage)
  Tensor logits, lse;                    // (N, Vp_local), (N)
  // The fused loss end (GPT::head_forward given a grad scale, head not vocabulary-sharded):
  // the logits' gradient, written over the logits (logits is then undefined), and its scale.
  Tensor dlogits;
  float dlogits_scale = 0.0f;
  std::vector<float> token_loss;         // (N) cross-entropy of each target (last stage), host
  // When defined ((N) f32 on the device): head_forward writes the per-token losses here and
  // leaves token_loss empty (no host read: GPT::forward_backward_on_device).
  Tensor loss_out;
  Tensor x0;                             // normalized embedding (modes reading x0)
  std::vector<Tensor> values;            // context values read by later layers (see Bundle)
  std::vector<Tensor> dense;             // DenseFormer inputs read by later averages
  std::vector<double> value_coef;        // the value mode's per-pass coefficients
  std::vector<double> value_dcoef;       // their gradients, filled in backward
};

}  // namespace vt
