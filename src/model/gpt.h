// GPT: the transformer of docs/model.md with every block shape and value path, with explicit
// forward and backward. The model owns no memory for parameters: it registers them in a
// ParamStore (flat arenas) and reads views. It is built for one pipeline stage (a contiguous
// layer range; the first stage holds wte, the last W_lm and the loss) and one tensor-parallel
// rank (heads, MLP columns and vocabulary rows split over the TP communicator). With the default
// ModelParallel it is the whole model on one process.
//
// The shared structs of a pass (LayerParams, Bundle, BlockActs, Activations) are activations.h's.
// The pieces: a block shape (block_shape.h, src/model/blocks/) composes the sub-layers of
// block_kit.h (norms, the attention sub-layer with its value path, the MLP, gains); a value
// mode (value_path.h, src/model/values/) computes target layers' values; DenseFormer
// (dense.h) averages block outputs between blocks. This file orchestrates a pass.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/communicator.h"
#include "core/tensor.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/recompute.h"
#include "model/init.h"
#include "model/table_rows.h"
#include "model/value_path.h"

namespace vt {

struct ModelParallel {
  Communicator* tp = nullptr;  // tensor-parallel group; nullptr means a group of one
  int layer_begin = 0;         // first layer of this pipeline stage
  int layer_end = -1;          // one past the last layer; -1 means n_layer
  // Interleaved pipeline schedule (--vpp): the layer ranges [begin, end) of this rank's model
  // chunks (virtual stages), in increasing order; when non-empty they replace layer_begin /
  // layer_end (see parallel/process_grid.h virtual_stage_layers).
  std::vector<std::pair<int, int>> chunks;

  Communicator* tp_comm() const { return tp ? tp : self_communicator(); }
  int tp_size() const { return tp_comm()->size(); }
  int tp_rank() const { return tp_comm()->rank(); }
};

class BlockShape;

// Sees (and may change) the residual stream after block `layer`'s forward (-1: the normalized
// embedding): diagnostics of non-finite values and fault injection (train/nonfinite.h).
using BlockOutputHook = std::function<void(int layer, const Tensor& x)>;

// What a caller sees of one pass, given with the pass (nothing is installed on the model):
// block_output after each block's forward (and the embedding's, layer -1; not when a block is
// recomputed in backward); layer_grads_done with a layer index right after that block's
// backward, when its parameter gradients are final for this micro-batch (the pipeline passes it
// for the last micro-batch of a step, so the data-parallel sum of that layer can start while
// backward goes on); head_grads_done likewise right after the output head's backward (the
// pipeline's last stage).
// block_state, in every forward right after block_output, sees what block `layer`'s forward
// saved (queries, keys, values; the value mode's sources in the bundle) before activation
// recomputation drops it (diagnostics: train/diagnose.h).
struct PassHooks {
  BlockOutputHook block_output;
  std::function<void(int layer)> layer_grads_done;
  std::function<void(int layer, const BlockActs& a, const Bundle& bundle, const Activations& acts)>
      block_state;
  std::function<void()> head_grads_done;
  // Right before a forward first reads the parameters of `layer` (-1: the embedding and the
  // shared parameters, at the start of embed_forward and blocks_forward; kHeadParams: the output
  // head, at the end of the last stage's blocks_forward); called in every forward pass, the
  // caller ignores all but the first (ZeRO-2 waits there for the gathers of the updated
  // parameters: optim/distributed_optimizer.h finish_param_gathers).
  std::function<void(int layer)> params_needed;
  static constexpr int kHeadParams = 1 << 30;
};

class GPT {
 public:
  GPT(const ModelConfig& config, const ModelParallel& parallel = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelParallel& parallel() const { return par_; }
  // A view of this stage (same parameters, same store) that runs sequences of T <= seq_len
  // tokens, for evaluating short inputs; every layer keeps its trained attention window.
  GPT with_seq_len(int T) const;
  // The layers this rank holds: one contiguous range (a chunk) per pipeline stage, or with the
  // interleaved schedule one chunk per virtual stage (ModelParallel::chunks). The stage pieces
  // below run one chunk at a time (Activations::chunk).
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  int chunk_begin(int c) const { return chunks_.at(c).first; }
  int chunk_end(int c) const { return chunks_.at(c).second; }
  // First layer held, one past the last (with one chunk: the stage's range).
  int layer_begin() const { return chunks_.front().first; }
  int layer_end() const { return chunks_.back().second; }
  bool holds_layer(int layer) const { return local_.at(layer) >= 0; }
  bool is_first_stage() const { return layer_begin() == 0; }
  bool is_last_stage() const { return layer_end() == cfg_.n_layer; }

  // Registers this stage's parameters (local shards) in `store` (before store.finalize()).
  void register_params(ParamStore& store);
  // Fills the parameters per docs/model.md's init; the same global values on any layout.
  void init_params(uint64_t seed);
  // wte's init rule, N(0, 0.8) (aligned value tables rebuild the same draw).
  static InitRule wte_init() { return InitRule::normal(0.8); }
  // The init rule of store parameter `idx`.
  const InitRule& init_rule(int idx) const { return init_rules_.at(idx); }

  // Records the micro-batch's token ids (checked against the vocabulary) in `acts`.
  // `chunk` selects the model chunk the pass runs (0 without the interleaved schedule).
  void start_activations(Activations& acts, const int32_t* inputs, const int32_t* targets,
                         int B, int chunk = 0) const;
  // Stage pieces (for the pipeline schedule). `inputs`/`targets` are (B, T) token ids.
  Bundle embed_forward(Activations& acts, const PassHooks& hooks = {}) const;
  void blocks_forward(Bundle& bundle, Activations& acts, const PassHooks& hooks = {}) const;
  // Sum over this micro-batch's tokens of the cross-entropy (nats). `grad_scale` (a training
  // pass, whose head_backward follows with the same scale): where the head is not vocabulary-
  // sharded (tp 1), the logits' gradient is made in the same pass over the logits
  // (ops::xent_loss_grad) and written over them (acts.dlogits), so one logits-sized buffer
  // lives and head_backward only runs the GEMMs. Without it (evaluation), or with tp > 1, the
  // logits stay in acts.logits and head_backward computes their gradient.
  double head_forward(const Bundle& bundle, Activations& acts,
                      std::optional<float> grad_scale = std::nullopt) const;
  // d loss_sum / d bundle times grad_scale (grad_scale = 1 / tokens in the whole batch).
  Bundle head_backward(Activations& acts, float grad_scale) const;
  void blocks_backward(Bundle& grad, Activations& acts, const PassHooks& hooks = {}) const;
  void embed_backward(Bundle& grad, Activations& acts) const;

  // Whole model on one stage: forward, loss sum, and (if backward) parameter gradients
  // accumulated with d loss_sum * grad_scale.
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, float grad_scale,
                          bool backward = true);
  // The same forward and backward with the ids already on the model's device and the per-token
  // losses left there: no host read and no upload, the form a CUDA graph can hold
  // (core/cuda_graph.h). input_ids, target_ids: (B*T) i32 on the device, in the vocabulary
  // (the caller checks them when it uploads them); token_loss: (B*T) f32, written. Not with
  // host-kept value tables (--table-offload), which read the ids on the host.
  void forward_backward_on_device(const Tensor& input_ids, const Tensor& target_ids, int B,
                                  float grad_scale, const Tensor& token_loss);

  // Activation recomputation (model/recompute.h): what each block's forward drops and its
  // backward reruns. Same results as without (the reruns are deterministic).
  void set_recompute(Recompute r) { recompute_ = r; }
  Recompute recompute() const { return recompute_; }
  // --fp8 e4m3: the blocks' linear layers multiply in FP8 (model/linear.h says which GEMMs and
  // why the others stay bf16); master weights, gradients and optimizer states are unchanged.
  void set_fp8(bool on) { fp8_ = on; }
  bool fp8() const { return fp8_; }

  // Which earlier layers' context values must be kept for later layers (the value mode says).
  bool keeps_value(int layer) const;
  ParamStore* store() const { return store_; }
  // The gradients whose every write is a weight-gradient GEMM that asks
  // ParamStore::take_first_write (linear::backward_dw by index, the head's): the blocks' W_Q,
  // W_K, fc, proj, their matrix V and O projections, and lm_head. The trainer defers their
  // zeroing to those GEMMs' beta = 0 (ParamStore::set_overwrite_first). Under --fp8 e4m3 only
  // lm_head (the FP8 weight-gradient GEMM accumulates, so its first write would need the zeroing
  // anyway).
  std::vector<int> gemm_written_grads() const;
  // Where activations live and their dtype: the store's device and compute dtype.
  Device device() const { return store_->device(); }
  DType act_dtype() const { return store_->compute_dtype(); }
  const LayerParams& layer_params(int layer) const { return layers_.at(local(layer)); }
  const ValueSharedParams& value_shared() const { return value_shared_; }
  const smear::Params& smear_params() const { return smear_; }
  // What the value mode reads about target layer `layer` for N rows of token ids `ids`
  // (`table_ids`: the same as compact ids into the prepared TableRows, when there are any).
  ValueLayerCtx value_ctx(int layer, int64_t N, const Tensor& ids, const std::vector<double>* coef,
                          std::vector<double>* dcoef, const Tensor& table_ids = {}) const;

  // Value tables kept in host memory (ParamStore::keep_in_host_memory, --table-offload): the
  // store indices of this rank's host-kept tables (empty: none). Before a pass over micro-batches
  // whose input ids are `inputs` (n_each each), prepare_table_rows() puts the rows they read on
  // the device (start_activations then records each micro-batch's compact ids); after the pass,
  // finish_table_rows() adds the rows' gradients into the host gradients (with_grads) and frees
  // them. See model/table_rows.h.
  const std::vector<int>& host_tables() const { return host_tables_; }
  void prepare_table_rows(const std::vector<const int32_t*>& inputs, int64_t n_each,
                          bool with_grads);
  void finish_table_rows();
  const TableRows& table_rows() const { return table_rows_; }
  int local_heads() const { return heads_; }
  int local_kv_heads() const { return kv_heads_; }
  int local_hidden() const { return hidden_; }
  int64_t vocab_offset() const { return vocab_offset_; }
  const BlockShape& block_shape() const { return *shape_; }
  // Layer `layer`'s fixed attention bias (T, T) for --attn-bias (undefined without), and the
  // fixed W0 slices of reparameterized projections: built on first use on the model's device.
  const Tensor& attention_bias(int layer) const;
  // Its location-dependent rescaling D_l (T,) for --spa-rescale on (undefined otherwise).
  const Tensor& attention_rowscale(int layer) const;
  // Which DenseFormer inputs x_j cross the boundary in front of layer `boundary`.
  bool keeps_dense(int j, int boundary) const;

 private:
  friend class TrainKit;
  // One block of this stage in training: its shape run through a TrainKit (defined in
  // train_kit.cc, beside the kit, so that gpt.cc does not include it back).
  // carry_in: the previous block's last residual add, not yet in bundle.x (undefined: none);
  // this block applies it fused with its input copy and first norm. carry_out (non-null): this
  // block's own last add may be left there for the next block instead of made.
  void block_forward(int layer, Bundle& bundle, Activations& acts, BlockActs& a,
                     const Tensor& carry_in = Tensor(), Tensor* carry_out = nullptr) const;
  void block_backward(int layer, Bundle& grad, Activations& acts, BlockActs& a) const;
  // DenseFormer's average after block i (dense.h): forward replaces bundle.x (x_{i+1}) by y_i;
  // backward turns grad.x (d y_i) into d x_{i+1}.
  void dense_forward(int i, Bundle& bundle) const;
  void drop_recomputed(BlockActs& a) const;
  void dense_backward(int i, Bundle& grad, const Activations& acts) const;
  // Builds the fixed tensors (W0 slices, attention biases) once the store is finalized.
  void ensure_fixed() const;
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
  const BlockShape* shape_ = nullptr;
  std::vector<std::pair<int, int>> chunks_;  // this rank's layer ranges
  std::vector<int> local_;                   // [layer] = index into layers_, -1: not held
  int local(int layer) const {
    const int i = local_.at(layer);
    VT_CHECK_MSG(i >= 0, "layer " << layer << " is not held by this rank");
    return i;
  }
  int heads_ = 0, kv_heads_ = 0;  // local (per TP rank)
  int hidden_ = 0;                // local MLP width
  int64_t vocab_rows_ = 0;        // local rows of wte / tables, columns of W_lm
  int64_t vocab_offset_ = 0;
  ParamStore* store_ = nullptr;
  std::vector<InitRule> init_rules_;  // per store index
  int wte_ = -1, lm_head_ = -1;
  smear::Params smear_;  // --smear-gate on, first stage
  ValueSharedParams value_shared_;
  std::vector<int> host_tables_;  // store indices of host-kept value tables (after finalize)
  TableRows table_rows_;
  mutable std::vector<LayerParams> layers_;  // mutable: Projection::base is filled lazily
  mutable std::vector<Tensor> attn_rowscale_;  // per held layer (undefined without --spa-rescale on)
  mutable std::vector<Tensor> attn_bias_;     // per held layer, as layers_ (undefined without --attn-bias)
  mutable bool fixed_ready_ = false;
  Recompute recompute_ = Recompute::kOff;
  bool fp8_ = false;
};

}  // namespace vt
