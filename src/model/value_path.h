// ValuePath: one value mode of docs/model.md ("Value paths") as one object: which layers it
// targets, the parameters it adds, how a target layer's value v is computed from its sources
// and the backward of that, what the KV cache keeps for it and what it needs carried across a
// pipeline boundary. Every mode lives in its own file under src/model/values/ and is listed in
// the registry (value_mode.cc). A block calls forward()/backward() on target layers only;
// non-target layers use their own context value.
#pragma once
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/arena.h"
#include "core/communicator.h"
#include "core/tensor.h"
#include "model/model_option.h"

namespace vt {

struct ModelConfig;
class ParamRegistrar;
class TableRows;

// Which layers a mode targets when --value-layers is `default`.
enum class DefaultTargets { kNone, kAll, kLastThird, kAlternate };

// Parameter indices (into the ParamStore) a mode registered for one target layer; their meaning
// is the mode's own. -1 where absent.
struct ValueLayerParams {
  int p[4] = {-1, -1, -1, -1};
  int table = -1;
};
// Parameters shared by every target layer (replicated over pipeline stages).
struct ValueSharedParams {
  int p[2] = {-1, -1};
};

// The sources a target layer reads (model device, activation dtype; undefined when unused).
struct ValueSources {
  Tensor v1;                   // (N, K) layer 0's context value
  Tensor ctx;                  // (N, K) this layer's context value (V projection of n, or of x0)
  Tensor gate_in;              // (N, C) the normalized block input
  std::vector<Tensor> values;  // [j] = layer j's context value, j < layer (reads_all_values)
};

// What a mode's forward keeps for its backward.
struct ValueState {
  Tensor emb;   // (N, K) table rows E[id] of this rank's heads
  Tensor gate;  // (N, kv_heads) f32 value-embed gate
};

// Everything about the layer and the pass a mode may read.
struct ValueLayerCtx {
  const ModelConfig* cfg = nullptr;
  const ParamStore* store = nullptr;
  const ValueLayerParams* params = nullptr;
  const ValueSharedParams* shared = nullptr;
  int layer = 0;
  int target_index = 0;    // position of `layer` in cfg->target_layers
  int64_t N = 0;           // rows (tokens)
  int kv_heads = 0;        // local KV heads
  Communicator* tp = nullptr;
  int64_t vocab_offset = 0;  // first vocabulary row of this rank's table shards
  Tensor ids;                // (N) i32 token ids on the model's device
  // Value tables kept in host memory (--table-offload): the pass's rows on the device and the
  // compact ids of this micro-batch into them (table_rows.h); null / undefined otherwise.
  const TableRows* table_rows = nullptr;
  Tensor table_ids;
  const std::vector<double>* pass_coef = nullptr;  // begin_pass() output for this pass
  std::vector<double>* pass_dcoef = nullptr;       // d loss / d pass_coef, accumulated
};

// Gradients a mode's backward produces besides its own parameters' (which it accumulates).
struct ValueGrads {
  Tensor dctx;                             // (N, K) written when the layer has a context value
  Tensor dgate_in;                         // (N, C) accumulated (+=): the block's d n
  std::vector<Tensor>* dvalues = nullptr;  // [j] += gradient of layer j's kept context value
  bool v1_grad = true;                     // false under --detach-v1
};

class ValuePath {
 public:
  virtual ~ValuePath() = default;
  virtual const char* name() const = 0;
  // One line for --help: what v is on which layers.
  virtual const char* help() const = 0;
  // The flags only this mode reads (--shared-table for bov...); given with another mode they
  // are refused by the model flags.
  virtual std::vector<ModelOption> options() const { return {}; }
  virtual DefaultTargets default_targets() const = 0;
  // Target layers read V1 (layer 0's context value), so layer 0 is never a target.
  virtual bool reads_v1() const { return false; }
  // Target layers read every earlier layer's context value.
  virtual bool reads_all_values() const { return false; }
  // A target layer's context value is its V projection applied to x0 (not to n).
  virtual bool context_from_x0() const { return false; }
  // A target layer keeps a V projection of its own.
  virtual bool target_has_wv() const { return true; }
  // Target layers own value tables (and the memory estimate counts their rows).
  virtual bool has_table() const { return false; }
  // Fills the defaults of the mode's options left unset in a config (finalize, before validate).
  virtual void fill_defaults(ModelConfig& cfg) const {}
  // Mode-specific checks of a finalized config (messages name the option).
  virtual absl::Status validate(const ModelConfig& cfg) const { return absl::OkStatus(); }

  // Parameters.
  virtual void register_shared(ParamRegistrar& r, ValueSharedParams& shared) const {}
  virtual void register_layer(ParamRegistrar& r, int layer, const ValueSharedParams& shared,
                              ValueLayerParams& params) const {}

  // Per pass: coefficients computed once from shared parameters (host), and the step that turns
  // their gradients into parameter gradients after the stage's backward.
  virtual void begin_pass(const ModelConfig& cfg, const ParamStore& store,
                          const ValueSharedParams& shared, std::vector<double>& coef) const {}
  virtual void end_backward(const ModelConfig& cfg, const ParamStore& store,
                            const ValueSharedParams& shared, const std::vector<double>& coef,
                            const std::vector<double>& dcoef) const {}

  // v (N, K) of a target layer.
  virtual void forward(const ValueLayerCtx& c, const ValueSources& src, ValueState& st,
                       const Tensor& v) const = 0;
  virtual void backward(const ValueLayerCtx& c, const ValueSources& src, const ValueState& st,
                        const Tensor& dv, ValueGrads& g) const = 0;
  // NeuTRENO-style modes add lam * (V1 - v) to the attention output; 0: nothing added.
  virtual float attention_output_v1_coef(const ModelConfig& cfg) const { return 0.0f; }
  // Modes mixing the embedding into a target layer's attention input (q, k and v read
  // (1 - c) n + c x0 instead of n; the MLP and the stream are untouched): c; 0: none.
  virtual float attention_input_x0_coef() const { return 0.0f; }
  // Does a target layer read x0 (which then crosses pipeline boundaries)?
  bool reads_x0() const { return context_from_x0() || attention_input_x0_coef() != 0.0f; }

  // Pipeline: must layer `layer`'s context value be kept (and sent across stage boundaries)
  // for later target layers?
  // The default: layer 0's, for modes reading V1, when there are target layers.
  virtual bool keeps_value(const ModelConfig& cfg, int layer) const;
  // KV cache: a target layer keeps its values (else they are rebuilt from V1 or the table by
  // calling forward() on the cached row); the cache keeps token ids for table lookups.
  virtual bool caches_values() const { return true; }
  virtual bool cache_keeps_ids() const { return false; }
};

// The sources target layer `layer` reads, chosen from the mode's facts (the one place that
// choice is made, for training and decoding): V1 = values[0], the layer's context value `ctx`,
// the gate input `n`, earlier context values; values are viewed as (rows, K) rows.
ValueSources gather_value_sources(const ValuePath& vp, int layer, int64_t K, const Tensor& n,
                                  const Tensor& ctx, const std::vector<Tensor>& values);

// Helpers shared by the modes (values/value_helpers.cc).
namespace value_ops {
// --value-coef learnable|NUMBER, declared by v1 and x0v: NUMBER replaces the learnable gain by a
// fixed coefficient (cfg.value_coef_fixed / value_coef); and its check (a finite number in the
// declared range of value_coef).
ModelOption value_coef_option();
absl::Status check_value_coef(const ModelConfig& cfg);
// grad += alpha * dv, allocating grad on first use.
void accumulate(Tensor& grad, const Tensor& dv, float alpha);
// grad += coef[elem] * dv (coefficient read on the device), allocating grad on first use.
void accumulate_coef(Tensor& grad, const Tensor& dv, const Tensor& coef, int64_t elem);
// d param[elem] += sum(dv * src), summed over the TP group (heads are split over TP).
void grad_scalar(const ValueLayerCtx& c, int param, int64_t elem, const Tensor& dv,
                 const Tensor& src);
// sum(dv * src) over the TP group, on the host.
double dot_host(const ValueLayerCtx& c, const Tensor& dv, const Tensor& src);
// Rows of vocabulary-sharded table `table` (a store index) for this rank's heads (see
// values/value_helpers.cc) into out (N, kv_heads * hd), and the backward (scatter-add into the
// rows this rank owns). A table kept in host memory is read from the pass's TableRows, or, for
// a forward without them (decoding), gathered on the host.
void table_lookup(const ValueLayerCtx& c, int table, const Tensor& out);
void table_lookup_backward(const ValueLayerCtx& c, const Tensor& de, int table);
// The "aligned" table init of bov / bov-add: E = norm(wte_init) W_V^layer_init, where W_V^layer
// is the V projection layer `layer` would start with under the config's block shape (drawn
// even when the mode stores none), so the first forward pass equals x0v's with gain 1.
std::vector<float> aligned_table_init(const ModelConfig& cfg, int layer, uint64_t seed);
}  // namespace value_ops

}  // namespace vt
