// Value mode `v1` (the BoV paper's ablation, docs/model.md "Value paths"): v = g V1 on the last
// third, g = blocks.i.value.gain (init 1), or with --value-coef NUMBER a fixed g and no gain
// parameter (BoV paper Table 1 rows 3 and 5); target layers have no W_V and cache no values.
// dV1 accumulates into layer 0's value gradient (when V1 is trained through).
#include "model/values/gained_source.h"

namespace vt {
namespace {

class V1Path final : public GainedSourcePath {
 public:
  const char* name() const override { return "v1"; }
  const char* help() const override {
    return "v = g V1 on the last third (no W_V there)";
  }
  bool reads_v1() const override { return true; }
  bool target_has_wv() const override { return false; }
  bool caches_values() const override { return false; }

 private:
  const Tensor& source(const ValueSources& src) const override { return src.v1; }
  void source_grad(ValueGrads& g, const Tensor& dv, float coef) const override {
    if (g.v1_grad) value_ops::accumulate((*g.dvalues)[0], dv, coef);
  }
  void source_grad(ValueGrads& g, const Tensor& dv, const Tensor& gain) const override {
    if (g.v1_grad) value_ops::accumulate_coef((*g.dvalues)[0], dv, gain, 0);
  }
};

}  // namespace

const ValuePath& v1_value_path() {
  static const V1Path m;
  return m;
}

}  // namespace vt
