// --cuda-graphs step: the optimizer step's device work (DistributedOptimizer::step_on_device:
// the step's scalars uploaded from pinned memory, the gradient norm, clip factor and finite check
// formed on the device by ops::step_guard, the AdamW and Muon updates reading them, the bf16
// compute copy) replayed from a CUDA graph after the micro-steps of train/graph_micro_steps.h.
//
// No value of the step is a kernel argument: the learning rates, momentum, weight decay and
// bias corrections (the step count) are floats the host writes into the scalars' pinned mirror
// before the launch (DistributedOptimizer::begin_step), and the clip factor and whether to apply
// at all are written by the guard kernel on the device; a step whose loss or gradient norm is not
// finite leaves the weights and states as they were, and the trainer then reads the guard
// (finish_step) and handles it as an eager step (--on-nonfinite). The first call runs the same
// work eagerly (the warm-up: cuBLASLt plans, reduction scratch), the second captures, later ones
// replay. The key: the optimizer's buffers and the losses' buffer and size; another key
// re-captures. Where it applies: graph_micro_steps.h's conditions and the optimizer's
// (DistributedOptimizer::device_step_unsupported: one rank, no parameters in host memory).
// Declared in every build; without CUDA unsupported() says so and nothing else is reached.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace vt {

class CudaStepGraph;
namespace optim {
class DistributedOptimizer;
}

class GraphOptimizerStep {
 public:
  // Why the optimizer step cannot be captured for this optimizer ("" when it can).
  static std::string unsupported(const optim::DistributedOptimizer& opt);

  explicit GraphOptimizerStep(optim::DistributedOptimizer& opt);
  ~GraphOptimizerStep();

  // The device part of the step begun by opt.begin_step(), with the step's per-token losses on
  // the device (checked for finiteness by the guard); queued, not waited for. The graph's error
  // (named) if it cannot be captured.
  absl::Status run(const Tensor& losses);

  int captures() const;
  int64_t replays() const;

 private:
  optim::DistributedOptimizer& opt_;
  std::unique_ptr<CudaStepGraph> graph_;
  bool warmed_up_ = false;
};

}  // namespace vt
