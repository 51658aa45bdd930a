// A layer's additions to softmax attention (see layer_attention.h).
#include "model/layer_attention.h"

#include "model/config.h"
#include "model/value_path.h"

namespace vt {

ops::AttnExtras layer_attention_extras(const ModelConfig& cfg, const ParamStore& store,
                                       const LayerParams& lp, int layer, const Tensor& bias,
                                       const Tensor& rowscale, const std::vector<Tensor>& values,
                                       const Shape& v_shape) {
  ops::AttnExtras ex;
  ex.bias = bias;
  ex.mix.rowscale = rowscale;
  if (lp.alpha >= 0) ex.mix.alpha = store.param(lp.alpha);
  if (lp.beta >= 0) ex.mix.beta = store.param(lp.beta);
  if (lp.gamma >= 0) ex.mix.gamma = store.param(lp.gamma);
  ex.mix.centre_on_bias = bias.defined() && ex.mix.gamma.defined() && cfg.spa_centre == "bias";
  if (cfg.is_target(layer)) {
    ex.mix.lam = cfg.value().attention_output_v1_coef(cfg);
    if (ex.mix.lam != 0.0f) ex.mix.v1 = values.at(0).reshaped(v_shape);
  }
  return ex;
}

}  // namespace vt
