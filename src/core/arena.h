// Flat arenas for parameters, gradients and optimizer states. Every parameter is registered
// (name, local shape, global shape, optimizer group, how it is split), then the store allocates
// one contiguous f32 buffer per kind, on the CPU or on the device, and hands out views.
// Contiguity lets data-parallel sync and checkpointing treat all parameters as one buffer.
// With a bf16 compute dtype the store also keeps a bf16 copy of the parameters (what the GEMMs
// read); refresh_compute_copy() re-derives it from the fp32 master weights after they change.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace vt {

// Optimizer group of a parameter (docs/model.md "Optimizer groups").
enum class ParamGroup : uint8_t {
  kMatrix,      // 2-D matrices inside the blocks: Muon
  kEmbedding,   // wte: AdamW
  kLmHead,      // W_lm: AdamW
  kValueTable,  // bov / bov-add / value-embed tables: AdamW
  kScalar,      // lambdas, gates, logits: AdamW
  kGain,        // block-shape gains (shaped attention, sub-layer and projection gains): AdamW
  kSmear,       // the smear gate's weight and lambda (model/smear_gate.h): AdamW, nanochat's group
  // The value paths' and DenseFormer's coefficients, each in the group its paper's official code
  // trains it with (docs/model.md "Optimizer groups"; --coef-optim vtrain gives all three the
  // scalar group's hyperparameters):
  kCoefMain,    // the BoV authors' "alpha" (main-path) group: bov-add's a
  kCoefSkip,    // the BoV authors' "beta" (skip-path) group: gamma_v of v1/x0v/bov, bov-add's b
  kCoefModel,   // trained like the model's weights: ResFormer's lambdas, DenseFormer's weights
};
const char* param_group_name(ParamGroup g);

// How the local tensor relates to the global one (for checkpoints on any layout).
struct ParamSplit {
  int axis = -1;          // -1: replicated (local == global)
  int64_t offset = 0;     // start of the local slice along `axis` in the global tensor
};

// What the rest of the system needs to know about a parameter beyond its shape, given where it
// is registered (so no module has to parse names for structure).
struct ParamMeta {
  int layer = -1;              // the transformer block that owns it; -1 for none (wte, lm_head, shared)
  bool pp_replicated = false;  // held whole by every pipeline stage (its gradient is summed over pp)
};

struct ParamInfo {
  std::string name;
  Shape shape;          // local shape
  Shape global_shape;   // shape of the whole parameter
  ParamSplit split;
  ParamGroup group = ParamGroup::kMatrix;
  int64_t offset = 0;   // element offset in the arena (the host arena when `host`)
  bool host = false;    // held in host memory (keep_in_host_memory) whatever the store's device
  int layer = -1;       // ParamMeta::layer
  bool pp_replicated = false;  // ParamMeta::pp_replicated
  int64_t numel() const { return shape_numel(shape); }
};

class ParamStore {
 public:
  // Registers a parameter; returns its index. Must be called before finalize().
  int add(const std::string& name, Shape shape, ParamGroup group, Shape global_shape = {},
          ParamSplit split = {}, ParamMeta meta = {});
  // Parameters of `group` are kept in host memory (their own arenas) whatever finalize()'s device.
  // Before the first add().
  void keep_in_host_memory(ParamGroup group);
  // Allocates the param and grad arenas (zero-filled) on `device`; with compute == kBF16 also
  // the bf16 compute copy.
  void finalize(Device device = Device::kCPU, DType compute = DType::kF32);
  bool finalized() const { return finalized_; }
  Device device() const { return device_; }
  DType compute_dtype() const { return compute_; }

  int size() const { return static_cast<int>(infos_.size()); }
  const ParamInfo& info(int i) const { return infos_.at(i); }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int find(const std::string& name) const;  // -1 when absent

  Tensor param(int i) const;
  Tensor grad(int i) const;
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;
  // The weights a GEMM reads: the bf16 copy when the compute dtype is bf16, else param(i).
  Tensor compute_param(int i) const;
  // Re-derives the bf16 compute copy from the master weights (no-op for f32 compute). Call after
  // init, checkpoint load and every optimizer step. `fresh` (one flag per parameter): those
  // whose copy an optimizer kernel already wrote (ops::muon_apply's copy) are skipped; the rest
  // are cast in maximal runs of neighbours (one op per run).
  void refresh_compute_copy();
  void refresh_compute_copy(const std::vector<char>& fresh);
  // The bf16 compute copy of parameter i, flat (undefined with f32 compute and for parameters
  // kept in host memory, which have none).
  Tensor compute_copy_flat(int i) const;
  // A CPU store with the same registration and parameter values and no gradient arena (grad()
  // must not be called on it): checkpoints are written from it and loaded into it.
  ParamStore host_mirror() const;
  // Copies every parameter value from `src` (same registration, any device) and refreshes the
  // compute copy.
  void copy_params_from(const ParamStore& src);
  // Whether t's elements lie inside the parameter arena or the bf16 compute copy (a weight view,
  // constant between optimizer steps; not a temporary derived from weights).
  bool holds_weights(const Tensor& t) const;
  // Whole arenas (1-D, total_numel() elements): every parameter not kept in host memory.
  Tensor params_tensor() const { return params_.flat(0, total_); }
  Tensor grads_tensor() const { return grads_.flat(0, total_); }
  // The host-memory arenas (1-D, host_numel() elements; empty without host-kept parameters).
  Tensor host_params_tensor() const { return host_params_.flat(0, host_total_); }
  Tensor host_grads_tensor() const { return host_grads_.flat(0, host_total_); }

  int64_t total_numel() const { return total_; }
  int64_t host_numel() const { return host_total_; }
  bool has_host_params() const { return host_total_ > 0; }
  float* param_data() const { return params_.f32(); }
  float* grad_data() const { return grads_.f32(); }
  // Every gradient zeroed; none waits for a first write (see begin_gradients).
  void zero_grads();

  // Deferred gradient zeroing (issue 37 item 3): the gradients named here are written only by
  // weight-gradient GEMMs that call take_first_write(). begin_gradients() zeroes every other
  // gradient (in runs of arena neighbours) and leaves these as they are: the step's first GEMM
  // into each overwrites it (beta = 0, the old values never read), later ones accumulate, so the
  // zeroing pass over them is gone. Without a call (or with an empty list) begin_gradients() is
  // zero_grads(). Host-kept parameters cannot be named.
  void set_overwrite_first(const std::vector<int>& params);
  // At the start of a step's backward passes (before the first micro-batch's).
  void begin_gradients();
  // For a gradient named in set_overwrite_first: true exactly once after begin_gradients(), and
  // then the caller must overwrite the whole gradient (later writes accumulate). False for every
  // other gradient and after zero_grads().
  bool take_first_write(int i);
  // Zeroes the gradients still waiting for their first write, so that they read as zero: every
  // one (kAllLayers), or those with ParamInfo::layer == layer (-1: outside the blocks). Before
  // anything reads gradients (the optimizer, the gradient sums, the per-layer hooks).
  static constexpr int kAllLayers = -2;
  void zero_unwritten(int layer = kAllLayers);
  // How many gradients wait for their first write (tests).
  int unwritten_count() const;

 private:
  std::vector<ParamInfo> infos_;
  std::map<std::string, int> by_name_;
  int64_t total_ = 0;
  int64_t host_total_ = 0;
  std::vector<ParamGroup> host_groups_;
  bool finalized_ = false;
  Device device_ = Device::kCPU;
  DType compute_ = DType::kF32;
  Tensor params_;
  Tensor grads_;
  Tensor compute_copy_;
  Tensor host_params_, host_grads_;  // Device::kCPU, host_total_ elements
  std::vector<char> overwrite_first_;  // per parameter: named in set_overwrite_first
  std::vector<char> unwritten_;        // per parameter: stale until its first write this step
  std::vector<std::pair<int64_t, int64_t>> zero_runs_;  // (offset, numel): begin_gradients' memsets
};

}  // namespace vt
