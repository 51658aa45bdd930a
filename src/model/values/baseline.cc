// Value mode `baseline` (docs/model.md, "Value paths"): standard attention, v = n W_V in every
// layer; it has no target layers.
#include "core/ops.h"
#include "model/config.h"
#include "model/value_path.h"
#include "model/values/plain_value.h"

namespace vt {
namespace {

class Baseline final : public PlainValue {
 public:
  const char* name() const override { return "baseline"; }
  const char* help() const override {
    return "standard attention: v = n W_V in every layer";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kNone; }
};

}  // namespace

const ValuePath& baseline_value_path() {
  static const Baseline m;
  return m;
}

}  // namespace vt
