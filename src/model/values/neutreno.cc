// Value mode `neutreno` (NeuTRENO, Nguyen et al. 2023; docs/model.md "Value paths"): target layers
// (all i >= 1) keep their ordinary value v = n W_V, and their attention output before W_O becomes A
// v + lam * (V1 - v), with lam fixed (0.4, the value we recall the ResFormer paper's comparison
// using, unverified: docs/model.md; --neutreno-lambda overrides). The term is added per query head
// from its KV head, inside the attention op (AttnMix); V1 is layer 0's context value and crosses
// pipeline boundaries like the other modes reading it. No parameters.
#include "core/ops.h"
#include "model/config.h"
#include "model/value_path.h"
#include "model/values/plain_value.h"

namespace vt {
namespace {

class Neutreno final : public PlainValue {
 public:
  const char* name() const override { return "neutreno"; }
  const char* help() const override {
    return "NeuTRENO: attention output + lam (V1 - v) on every layer >= 1";
  }
  DefaultTargets default_targets() const override { return DefaultTargets::kAll; }
  std::vector<ModelOption> options() const override {
    return {{no_default(config_field_flag("neutreno_lambda", 0.4,
                                          "NeuTRENO's lam (value mode neutreno; default 0.4)")),
             [](const Flags& f, ModelConfig& cfg) {
               if (f.has("neutreno-lambda")) cfg.neutreno_lambda = f.get_double("neutreno-lambda");
             }}};
  }
  bool reads_v1() const override { return true; }
  float attention_output_v1_coef(const ModelConfig& cfg) const override {
    return static_cast<float>(cfg.neutreno_lambda);
  }
};

}  // namespace

const ValuePath& neutreno_value_path() {
  static const Neutreno m;
  return m;
}

}  // namespace vt
