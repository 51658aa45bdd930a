// GPT: the transformer of MODEL.md section 1 with every value path of section 2, with explicit
// forward and backward. The model owns no memory for parameters: it registers them in a
// ParamStore (flat arenas) and reads views. It is built for one pipeline stage (a contiguous
// layer range; the first stage holds wte, the last W_lm and the loss) and one tensor-parallel
// rank (heads, MLP columns and vocabulary rows split over the TP communicator). With the default
// ModelParallel it is the whole model on one process.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/tensor.h"
#include "model/config.h"
#include "core/communicator.h"

namespace vt {

struct ModelParallel {
  Communicator* tp = nullptr;  // tensor-parallel group; nullptr means a group of one
  int layer_begin = 0;         // first layer of this pipeline stage
  int layer_end = -1;          // one past the last layer; -1 means n_layer

  Communicator* tp_comm() const { return tp ? tp : self_communicator(); }
  int tp_size() const { return tp_comm()->size(); }
  int tp_rank() const { return tp_comm()->rank(); }
};

// Parameter indices (into the ParamStore) of one layer; -1 where absent.
struct LayerParams {
  int wq = -1, wk = -1, wv = -1, wo = -1, fc = -1, proj = -1;
  int lambda1 = -1, lambda2 = -1, dense = -1, gain = -1, table = -1, a = -1, b = -1, gate_w = -1;
};

// What crosses a pipeline-stage boundary going forward (or, in backward, its gradient).
struct Bundle {
  Tensor x;                    // (B, T, C) residual stream
  Tensor x0;                   // (B, T, C) normalized embedding, when the mode reads it
  std::vector<Tensor> values;  // [j] = layer j's context value (B, T, Hkv_local*hd) when read later
};

// Everything one layer saves in forward for its backward.
struct BlockActs {
  Tensor x_in, rstd1, n1;        // attention input, its norm
  Tensor q_r, rstd_q, k_r, rstd_k, qn, kn;  // after RoPE, after QK-norm
  Tensor ctx_v;                  // n1 W_V (or x0 W_V for x0v) when the layer has W_V
  Tensor emb;                    // table rows E[id] (local heads) for table modes
  Tensor gate;                   // value-embed gate 3*sigmoid(z), (N, Hkv_local)
  Tensor v, y, lse;              // mixed value, attention output, log-sum-exp
  Tensor x_mid, rstd2, n2, h, act;  // MLP input, its norm, pre-activation, relu^2
};

// The saved state of one micro-batch's forward pass on this stage.
struct Activations {
  int B = 0;
  std::vector<int32_t> inputs, targets;  // (B*T) on the host
  Tensor input_ids, target_ids;          // the same on the model's device (i32)
  Tensor emb_raw, emb_rstd;              // wte rows before norm, norm's rstd (first stage)
  std::vector<BlockActs> blocks;         // indexed by layer - layer_begin
  Tensor head_x, head_rstd, head_n;      // final residual, its norm (last stage)
  Tensor logits, lse;                    // (N, Vp_local), (N)
  std::vector<float> token_loss;         // (N) cross-entropy of each target (last stage), host
  Tensor x0;                             // normalized embedding (modes reading x0)
  std::vector<Tensor> values;            // context values read by later layers (see Bundle)
  std::vector<double> plus_coef;         // resformer-plus coefficient per target layer
  std::vector<double> plus_dcoef;        // d loss / d coefficient, filled in backward
};

// Sees (and may change) the residual stream after block `layer`'s forward (-1: the normalized
// embedding): diagnostics of non-finite values and fault injection (train/nonfinite.h).
using BlockOutputHook = std::function<void(int layer, const Tensor& x)>;

class GPT {
 public:
  GPT(const ModelConfig& config, const ModelParallel& parallel = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelParallel& parallel() const { return par_; }
  // A view of this stage (same parameters, same store) that runs sequences of T <= seq_len
  // tokens, for evaluating short inputs; every layer keeps its trained attention window.
  GPT with_seq_len(int T) const;
  int layer_begin() const { return begin_; }
  int layer_end() const { return end_; }
  bool is_first_stage() const { return begin_ == 0; }
  bool is_last_stage() const { return end_ == cfg_.n_layer; }

  // Registers this stage's parameters (local shards) in `store` (before store.finalize()).
  void register_params(ParamStore& store);
  // Fills the parameters per MODEL.md's init; the same global values on any layout.
  void init_params(uint64_t seed);

  // Records the micro-batch's token ids (checked against the vocabulary) in `acts`.
  void start_activations(Activations& acts, const int32_t* inputs, const int32_t* targets,
                         int B) const;
  // Stage pieces (for the pipeline schedule). `inputs`/`targets` are (B, T) token ids.
  Bundle embed_forward(Activations& acts) const;
  void blocks_forward(Bundle& bundle, Activations& acts) const;
  // Sum over this micro-batch's tokens of the cross-entropy (nats).
  double head_forward(const Bundle& bundle, Activations& acts) const;
  // d loss_sum / d bundle times grad_scale (grad_scale = 1 / tokens in the whole batch).
  Bundle head_backward(Activations& acts, float grad_scale) const;
  void blocks_backward(Bundle& grad, Activations& acts) const;
  void embed_backward(Bundle& grad, Activations& acts) const;

  // Whole model on one stage: forward, loss sum, and (if backward) parameter gradients
  // accumulated with d loss_sum * grad_scale.
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, float grad_scale,
                          bool backward = true);

  // Activation recomputation per block: forward keeps only each block's input; backward reruns
  // the block's forward (including its tensor-parallel communication) right before its
  // backward. Saved activations drop from ~(4C + 3q + 4kv + 2*hidden) to C values per token and
  // layer, for ~1/3 more compute. Same results as without (the rerun is deterministic).
  void set_recompute(bool on) { recompute_ = on; }
  // Called with the layer index right after each block's backward (its parameter gradients are
  // final for this micro-batch); the pipeline sets it for the last micro-batch of a step so the
  // data-parallel sum of that layer's gradients can start while backward goes on.
  void set_layer_grads_hook(std::function<void(int)> hook) { layer_grads_hook_ = std::move(hook); }
  bool recompute() const { return recompute_; }
  // Installs (or, with an empty function, removes) the block-output observer. Not called when
  // a block is recomputed in backward.
  void set_block_output_hook(BlockOutputHook hook) { block_output_hook_ = std::move(hook); }

  // Which earlier layers' context values must be kept for later layers.
  bool keeps_value(int layer) const;
  // Parameters replicated over pipeline stages (their gradients are summed over the pp group).
  static bool is_pipeline_shared(const std::string& name) {
    return name == "value_plus.logits" || name == "value.table";
  }
  ParamStore* store() const { return store_; }
  // Where activations live and their dtype: the store's device and compute dtype.
  Device device() const { return store_->device(); }
  DType act_dtype() const { return store_->compute_dtype(); }
  const LayerParams& layer_params(int layer) const { return layers_.at(layer - begin_); }

 private:
  void block_forward(int layer, Bundle& bundle, Activations& acts, BlockActs& a) const;
  void block_backward(int layer, Bundle& grad, Activations& acts, BlockActs& a) const;
  XentArgs xent_args(const Activations& acts) const;
  Tensor P(int idx) const { return store_->param(idx); }
  Tensor G(int idx) const { return store_->grad(idx); }
  // GEMM weights: the bf16 compute copy when activations are bf16.
  Tensor W(int idx) const { return store_->compute_param(idx); }
  // New zero-filled activation (compute dtype) and f32 tensors on the model's device.
  Tensor act(Shape s) const { return Tensor::zeros(std::move(s), act_dtype(), device()); }
  Tensor f32(Shape s) const { return Tensor::zeros(std::move(s), DType::kF32, device()); }

  ModelConfig cfg_;
  ModelParallel par_;
  int begin_ = 0, end_ = 0;
  int heads_ = 0, kv_heads_ = 0;  // local (per TP rank)
  int hidden_ = 0;                // local MLP width
  int64_t vocab_rows_ = 0;        // local rows of wte / tables, columns of W_lm
  int64_t vocab_offset_ = 0;
  ParamStore* store_ = nullptr;
  int wte_ = -1, lm_head_ = -1, plus_logits_ = -1, shared_table_ = -1;
  std::vector<LayerParams> layers_;
  bool recompute_ = false;
  std::function<void(int)> layer_grads_hook_;
  BlockOutputHook block_output_hook_;
};

}  // namespace vt
