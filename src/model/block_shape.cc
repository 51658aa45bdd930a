// The block-shape registry (block_shape_kind.h) and the helpers shapes share (block_shape.h).
#include "model/block_shape.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "model/init.h"
#include "model/param_registrar.h"

namespace vt {

// Defined in src/model/blocks/*.cc.
const BlockShape& prenorm_block_shape();
const BlockShape& parallel_block_shape();
const BlockShape& vskipinit_block_shape();
const BlockShape& sas_block_shape();
const BlockShape& sas_p_block_shape();

namespace {
struct ShapeEntry {
  BlockShapeKind kind;
  const BlockShape& (*shape)();
};
const ShapeEntry kShapes[] = {
    {BlockShapeKind::kPrenorm, prenorm_block_shape},
    {BlockShapeKind::kParallel, parallel_block_shape},
    {BlockShapeKind::kVSkipInit, vskipinit_block_shape},
    {BlockShapeKind::kSas, sas_block_shape},
    {BlockShapeKind::kSasP, sas_p_block_shape},
};

double matrix_bound(const ModelConfig& cfg) { return std::sqrt(3.0 / cfg.n_embd); }
std::string layer_prefix(int layer) { return "blocks." + std::to_string(layer) + "."; }
}  // namespace

const std::vector<BlockShapeKind>& all_block_shapes() {
  static const std::vector<BlockShapeKind> shapes = [] {
    std::vector<BlockShapeKind> v;
    for (const auto& e : kShapes) v.push_back(e.kind);
    return v;
  }();
  return shapes;
}

const BlockShape& block_shape(BlockShapeKind s) {
  for (const auto& e : kShapes)
    if (e.kind == s) return e.shape();
  VT_CHECK_MSG(false, "block shape " << static_cast<int>(s) << " is not registered");
  return prenorm_block_shape();
}

const char* block_shape_name(BlockShapeKind s) { return block_shape(s).name(); }

absl::StatusOr<BlockShapeKind> parse_block_shape(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& e : kShapes) {
    if (name == e.shape().name()) return e.kind;
    names.push_back(e.shape().name());
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown block shape '", name,
                                                 "' (--block); choose one of: ",
                                                 absl::StrJoin(names, ", ")));
}

absl::Status BlockShape::validate(const ModelConfig& cfg) const {
  if (cfg.norm_none)
    return absl::InvalidArgumentError(absl::StrCat(
        "--norm none: block shape '", name(), "' needs its pre-norms (its residual stream is not "
        "rescaled); only --block sas or sas-p run without them"));
  if (!cfg.reparam_init.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--reparam-init applies to the identity value/output projections of --block sas and "
        "sas-p; block shape '", name(), "' has ordinary W_V and W_O"));
  if (!cfg.attn_bias.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--attn-bias ", cfg.attn_bias, " is built for W_Q starting at 0 (the softmax matrix is "
        "then the bias's alone) under the shaped attention of --block sas and sas-p (alpha and "
        "gamma start at 0 with a bias); block shape '", name(), "' does not take it"));
  if (cfg.proj_gains)
    return absl::InvalidArgumentError(absl::StrCat(
        "--proj-gains on applies to the identity value/output projections of --block sas and "
        "sas-p; block shape '", name(), "' has ordinary W_V and W_O"));
  return absl::OkStatus();
}

std::vector<float> BlockShape::initial_value_projection(const ModelConfig& cfg, int layer,
                                                        uint64_t seed) const {
  const double s = matrix_bound(cfg);
  return uniform_init(seed, layer_prefix(layer) + "attn.wv",
                      static_cast<int64_t>(cfg.n_embd) * cfg.kv_dim(), -s, s);
}

std::vector<float> BlockShape::projection_base(const ModelConfig&, int layer, bool) const {
  VT_CHECK_MSG(false, "block shape " << name() << " has no reparameterized projection (layer "
                                     << layer << ")");
  return {};
}

std::vector<float> initial_value_projection(const ModelConfig& cfg, int layer, uint64_t seed) {
  return block_shape(cfg.block).initial_value_projection(cfg, layer, seed);
}

namespace block_params {

void register_qk(ParamRegistrar& r, int layer, LayerParams& lp, bool zero_wq) {
  const ModelConfig& cfg = r.config();
  const std::string p = layer_prefix(layer);
  const double s = matrix_bound(cfg);
  const int64_t C = cfg.n_embd;
  lp.wq = r.matrix_cols(p + "attn.wq", C, cfg.q_dim(),
                        zero_wq ? InitRule::zeros() : InitRule::uniform(-s, s), layer);
  lp.wk = r.matrix_cols(p + "attn.wk", C, cfg.kv_dim(), InitRule::uniform(-s, s), layer);
}

void register_mlp(ParamRegistrar& r, int layer, LayerParams& lp, bool proj_random) {
  const ModelConfig& cfg = r.config();
  const std::string p = layer_prefix(layer);
  const double s = matrix_bound(cfg);
  const int64_t C = cfg.n_embd;
  lp.fc = r.matrix_cols(p + "mlp.fc", C, cfg.mlp_hidden(), InitRule::uniform(-0.4 * s, 0.4 * s),
                        layer);
  lp.proj = r.matrix_rows(p + "mlp.proj", cfg.mlp_hidden(), C,
                          proj_random ? InitRule::uniform(-0.4 * s, 0.4 * s) : InitRule::zeros(),
                          layer);
}

void register_vo_matrices(ParamRegistrar& r, int layer, LayerParams& lp, bool wo_random) {
  const ModelConfig& cfg = r.config();
  const std::string p = layer_prefix(layer);
  const double s = matrix_bound(cfg);
  const int64_t C = cfg.n_embd;
  if (cfg.layer_has_wv(layer)) {
    lp.v.kind = Projection::Kind::kMatrix;
    lp.v.w = r.matrix_cols(p + "attn.wv", C, cfg.kv_dim(), InitRule::uniform(-s, s), layer);
  }
  lp.o.kind = Projection::Kind::kMatrix;
  lp.o.w = r.matrix_rows(p + "attn.wo", cfg.q_dim(), C,
                         wo_random ? InitRule::uniform(-s, s) : InitRule::zeros(), layer);
}

}  // namespace block_params

}  // namespace vt
