// Value mode `resformer-hidden` (the ResFormer paper's hidden-state residual control, docs/model.md
// "Value paths"): a target layer's attention sub-layer reads m = 0.5 n + 0.5 x0 in place of its
// normalized input n, so q, k and v all carry the embedding (v = m W_V, its ordinary value of
// m); the MLP and the residual stream are untouched. The mixing lives in the attention of the
// training and decoding kits (attention_input_x0_coef); x0 crosses pipeline boundaries as for
// x0v. No parameters.
#include "core/ops.h"
#include "model/config.h"
#include "model/value_path.h"
#include "model/values/plain_value.h"

namespace vt {
namespace {

class ResformerHidden final : public PlainValue {
 public:
  const char* name() const override { return "resformer-hidden"; }
  const char* help() const override {
    return "control: q, k, v of layers >= 1 read 0.5 norm(x) + 0.5 x0 (a hidden-state residual)";
  }
  // Every layer. At layer 0 the attention input norm(x0) is x0 already, so the mix changes
  // nothing there (up to rounding); layers >= 1 are the ones it affects.
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  float attention_input_x0_coef() const override { return 0.5f; }
};

}  // namespace

const ValuePath& resformer_hidden_value_path() {
  static const ResformerHidden m;
  return m;
}

}  // namespace vt
