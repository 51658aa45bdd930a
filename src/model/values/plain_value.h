// PlainValue: the value paths whose layers keep their ordinary value, v = n W_V (the projection's
// output passed through, and its gradient back): baseline, and the modes whose terms act
// elsewhere (neutreno on the attention output, resformer-hidden on the attention input). Each
// mode derives from it and says only what differs.
#pragma once
#include "core/ops.h"
#include "model/value_path.h"

namespace vt {

class PlainValue : public ValuePath {
 public:
  void forward(const ValueLayerCtx&, const ValueSources& src, ValueState&,
               const Tensor& v) const override {
    ops::copy(v, src.ctx);
  }
  void backward(const ValueLayerCtx&, const ValueSources&, const ValueState&, const Tensor& dv,
                ValueGrads& g) const override {
    ops::copy(g.dctx, dv);
  }
};

}  // namespace vt
