// Value mode `svformer` (docs/model.md, "Value paths"): every layer i >= 1 uses V1 itself and
// has no W_V; only layer 0's values are kept in the KV cache.
#include "core/ops.h"
#include "model/config.h"
#include "model/value_path.h"

namespace vt {
namespace {

class Svformer final : public ValuePath {
 public:
  const char* name() const override { return "svformer"; }
  const char* help() const override {
    return "v = V1 on every layer >= 1 (no W_V there)";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  bool reads_v1() const override { return true; }
  bool target_has_wv() const override { return false; }
  bool caches_values() const override { return false; }
  void forward(const ValueLayerCtx&, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    ops::copy(v, src.v1);
  }
  void backward(const ValueLayerCtx&, const ValueSources&, const ValueState&, const Tensor& dv,
                ValueGrads& g) const override {
    if (g.v1_grad) value_ops::accumulate((*g.dvalues)[0], dv, 1.0f);
  }
};

}  // namespace

const ValuePath& svformer_value_path() {
  static const Svformer m;
  return m;
}

}  // namespace vt
