// Non-finite values in a run: where a NaN or inf came from when the loss or the gradient norm
// stops being finite, and the fault injection the tests use to put one into a weight, an
// activation or a gradient on any backend.
//
// The trainer checks the loss and the global gradient norm of every step before the optimizer
// touches the weights. When either is not finite it calls diagnose_nonfinite(), which says (on
// every rank, collectively) which parameters hold non-finite values, which gradients do, and —
// rerunning the step's forward passes with an observer on every block — the first layer whose
// output is not finite. None of this runs on a healthy step.
//
// Fault injection (tests only; docs/design.md "Test hooks"): the environment variable
//   VTRAIN_INJECT_NONFINITE=WHERE:TARGET:VALUE@STEP or ...@FIRST-LAST
// with WHERE weight|activation|gradient, TARGET a parameter name (weight, gradient) or a layer
// index (activation: the block's output; -1 is the embedding), VALUE nan|inf, STEP the 1-based
// step (or a range of steps). A weight gets VALUE added to its first element before the step's
// forward, a gradient after the backward, an activation is multiplied by VALUE in every forward
// pass of that step.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/arena.h"
#include "model/gpt.h"
#include "pipeline/pipeline.h"
#include "parallel/process_grid.h"

namespace vt {

struct FaultInjection {
  enum class Where { kNone, kWeight, kActivation, kGradient };
  Where where = Where::kNone;
  std::string param;  // weight / gradient
  int layer = 0;      // activation
  float value = 0;    // NaN or inf
  int64_t step = 0, last_step = 0;  // 1-based, inclusive

  // From VTRAIN_INJECT_NONFINITE (kNone when unset); errors name the malformed part.
  static absl::StatusOr<FaultInjection> from_env();
  bool at(int64_t step_1based, Where w) const {
    return where == w && step_1based >= step && step_1based <= last_step;
  }
};

// Elements of `t` (any device, f32 or bf16) that are NaN or infinite.
int64_t count_nonfinite(const Tensor& t);

// Collective over the grid. Describes where non-finite values are: parameters and gradients
// (names and counts, in the model's order), and the first block (or the embedding) whose output
// is not finite when `rerun_forward` replays the step's forward passes (it is given an observer
// to install on the model for the replay; may be empty). One line per finding.
std::string diagnose_nonfinite(const GPT& model, const ParamStore& store, const ProcessGrid& grid,
                               const std::function<void(const BlockOutputHook&)>& rerun_forward);

}  // namespace vt
