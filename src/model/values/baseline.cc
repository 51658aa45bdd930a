// Value mode `baseline` (docs/model.md, "Value paths"): standard attention, v = n W_V in every
// layer; it has no target layers.
#include "core/ops.h"
#include "model/config.h"
#include "model/value_path.h"

namespace vt {
namespace {

class Baseline final : public ValuePath {
 public:
  const char* name() const override { return "baseline"; }
  const char* help() const override {
    return "standard attention: v = n W_V in every layer";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kNone; }
  void forward(const ValueLayerCtx&, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    ops::copy(v, src.ctx);
  }
  void backward(const ValueLayerCtx&, const ValueSources&, const ValueState&, const Tensor& dv,
                ValueGrads& g) const override {
    ops::copy(g.dctx, dv);
  }
};

}  // namespace

const ValuePath& baseline_value_path() {
  static const Baseline m;
  return m;
}

}  // namespace vt
