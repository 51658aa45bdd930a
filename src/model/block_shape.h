// BlockShape: one block shape of docs/model.md ("Block shapes") as one object: the parameters
// it gives a layer (projections, gains, attention-matrix gains and their inits), its checks of
// the config, and the forward and backward of its composition of sub-layers (block_kit.h).
// Each shape lives in src/model/blocks/; the registry is block_shape_kind.h / block_shape.cc.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/activations.h"
#include "model/block_shape_kind.h"
#include "model/model_option.h"

namespace vt {

class BlockKit;
struct ModelConfig;
class ParamRegistrar;

class BlockShape {
 public:
  virtual ~BlockShape() = default;
  virtual const char* name() const = 0;
  // One line for --help: the composition of the block.
  virtual const char* help() const = 0;
  // The flags only this shape reads (--norm, --reparam-init, --attn-bias for sas and sas-p);
  // validate() refuses them with other shapes.
  virtual std::vector<ModelOption> options() const { return {}; }
  // Shape-specific checks of a config (messages name the option to change). The default refuses
  // the options only the simplified shapes (sas, sas-p) have: --norm none, --reparam-init,
  // --proj-gains on, --attn-bias.
  virtual absl::Status validate(const ModelConfig& cfg) const;
  // QK-norm when --qk-norm is not given.
  virtual bool default_qk_norm() const { return true; }
  // Registers layer i's parameters (W_Q, W_K, W_V/W_O or their identities, the MLP, gains).
  virtual void register_layer(ParamRegistrar& r, int layer, LayerParams& lp) const = 0;
  // The global V projection (C x Hkv*hd, row-major) layer `layer` starts with, whether or not
  // the layer stores one (aligned value tables are built from it).
  virtual std::vector<float> initial_value_projection(const ModelConfig& cfg, int layer,
                                                      uint64_t seed) const;
  // The fixed W0 (global C x C, row-major) of layer `layer`'s reparameterized V (out = false)
  // or O (out = true) projection.
  virtual std::vector<float> projection_base(const ModelConfig& cfg, int layer, bool out) const;
  // Whether layer `layer`'s forward opens with k.norm(a.x_in, a.norm1) with the norm on (and
  // reads a.x_in nowhere before it): training then may hand it that norm already computed, fused
  // with the previous block's last residual add (BlockKit::residual_add).
  virtual bool opens_with_norm(const ModelConfig&, int /*layer*/) const { return false; }
  // Whether layer `layer`'s forward writes its stream x in place (ops on x itself, beyond
  // BlockKit::add_norm and residual_add, which never do): then the input the previous block's
  // carried add makes is copied into a.x_in; otherwise a.x_in is the stream buffer itself.
  virtual bool writes_stream_in_place(const ModelConfig&, int /*layer*/) const { return true; }
  // x (N, C): the block input, replaced by the block output. The caller saved a copy in a.x_in.
  virtual void forward(const BlockKit& k, Tensor& x, BlockActs& a) const = 0;
  // dx: d loss / d block output, replaced by d loss / d block input.
  virtual void backward(const BlockKit& k, Tensor& dx, BlockActs& a) const = 0;
};

// Helpers for shapes: the standard registrations of docs/model.md section "Base transformer".
namespace block_params {
// W_Q, W_K (U(-s, s), s = sqrt(3/d); W_Q zero when zero_wq).
void register_qk(ParamRegistrar& r, int layer, LayerParams& lp, bool zero_wq);
// W_fc (U(-0.4s, 0.4s)), W_proj (0, or U(-0.4s, 0.4s) when proj_random).
void register_mlp(ParamRegistrar& r, int layer, LayerParams& lp, bool proj_random = false);
// A plain W_V matrix (U(-s, s)) and W_O (zero, or U(-s, s) when wo_random).
void register_vo_matrices(ParamRegistrar& r, int layer, LayerParams& lp, bool wo_random);
}  // namespace block_params

// initial_value_projection of the config's block shape.
std::vector<float> initial_value_projection(const ModelConfig& cfg, int layer, uint64_t seed);

}  // namespace vt
