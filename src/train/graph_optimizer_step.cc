// GraphOptimizerStep (see graph_optimizer_step.h).
#include "train/graph_optimizer_step.h"

#include <cstdio>

#include "core/backend.h"
#include "core/check.h"
#if VTRAIN_HAS_CUDA
#include "core/cuda_graph.h"
#endif
#include "optim/distributed_optimizer.h"

namespace vt {

#if !VTRAIN_HAS_CUDA

std::string GraphOptimizerStep::unsupported(const optim::DistributedOptimizer&) {
  return "this build has no CUDA";
}
GraphOptimizerStep::GraphOptimizerStep(optim::DistributedOptimizer& opt) : opt_(opt) {
  VT_CHECK_MSG(false, "GraphOptimizerStep without CUDA");
}
GraphOptimizerStep::~GraphOptimizerStep() = default;
absl::Status GraphOptimizerStep::run(const Tensor&) {
  return absl::UnimplementedError("--cuda-graphs step: this build has no CUDA");
}
int GraphOptimizerStep::captures() const { return 0; }
int64_t GraphOptimizerStep::replays() const { return 0; }

#else

std::string GraphOptimizerStep::unsupported(const optim::DistributedOptimizer& opt) {
  return opt.device_step_unsupported();
}

GraphOptimizerStep::GraphOptimizerStep(optim::DistributedOptimizer& opt)
    : opt_(opt),
      graph_(std::make_unique<CudaStepGraph>("optimizer step", *backend(Device::kCUDA).cuda())) {}

GraphOptimizerStep::~GraphOptimizerStep() = default;
int GraphOptimizerStep::captures() const { return graph_->captures(); }
int64_t GraphOptimizerStep::replays() const { return graph_->replays(); }

absl::Status GraphOptimizerStep::run(const Tensor& losses) {
  auto body = [&] { opt_.step_on_device(losses); };
  if (!warmed_up_) {
    body();
    warmed_up_ = true;
    return absl::OkStatus();
  }
  char shapes[160];
  std::snprintf(shapes, sizeof shapes, "losses=%lld max_grad_norm=%a",
                static_cast<long long>(losses.numel()), opt_.config().max_grad_norm);
  GraphKey key{shapes, opt_.device_step_buffers()};
  key.buffers.push_back(losses.raw());
  const int before = graph_->captures();
  absl::Status st = graph_->run(key, body);
  if (st.ok() && graph_->captures() != before)
    std::printf("cuda graphs: captured the optimizer step (%s); replayed from now on\n", shapes);
  return st;
}

#endif  // VTRAIN_HAS_CUDA

}  // namespace vt
