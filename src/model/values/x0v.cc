// Value mode `x0v` (docs/model.md, "Value paths"): v = g x0 W_V^i on the last third: layer i's
// own V projection applied to the normalized embedding x0 (which crosses pipeline boundaries),
// g = blocks.i.value.gain (init 1), or with --value-coef NUMBER a fixed g and no gain parameter
// (BoV paper Table 1 row 8). The context is x0 (context_from_x0), so dS is written to dctx.
#include "model/values/gained_source.h"

namespace vt {
namespace {

class X0v final : public GainedSourcePath {
 public:
  const char* name() const override { return "x0v"; }
  const char* help() const override {
    return "v = g x0 W_V on the last third (the V projection of the embedding)";
  }
  bool context_from_x0() const override { return true; }

 private:
  const Tensor& source(const ValueSources& src) const override { return src.ctx; }
  void source_grad(ValueGrads& g, const Tensor& dv, float coef) const override {
    ops::scale_copy(g.dctx, dv, coef);
  }
  void source_grad(ValueGrads& g, const Tensor& dv, const Tensor& gain) const override {
    ops::scale_copy_coef(g.dctx, dv, gain);
  }
};

}  // namespace

const ValuePath& x0v_value_path() {
  static const X0v m;
  return m;
}

}  // namespace vt
