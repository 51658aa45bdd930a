// GraphMicroSteps (see graph_micro_steps.h).
#include "train/graph_micro_steps.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/arena.h"
#include "core/backend.h"
#include "core/check.h"
#if VTRAIN_HAS_CUDA
#include "core/cuda_graph.h"
#endif
#include "model/gpt.h"
#include "train/options.h"
#include "train/run_builder.h"

namespace vt {

#if !VTRAIN_HAS_CUDA

std::string GraphMicroSteps::unsupported(const TrainOptions&, const Run&) {
  return "this build has no CUDA";
}
GraphMicroSteps::GraphMicroSteps(GPT& model, ParamStore& store, int B, int64_t T, int vocab)
    : model_(model), store_(store), B_(B), T_(T), vocab_(vocab) {
  VT_CHECK_MSG(false, "GraphMicroSteps without CUDA");
}
GraphMicroSteps::~GraphMicroSteps() = default;
absl::Status GraphMicroSteps::queue(int, float, const FetchBatch&) {
  return absl::UnimplementedError("--cuda-graphs: this build has no CUDA");
}
double GraphMicroSteps::read_loss_sum() { return 0.0; }
absl::StatusOr<double> GraphMicroSteps::run(int, float, const FetchBatch&) {
  return absl::UnimplementedError("--cuda-graphs: this build has no CUDA");
}
int GraphMicroSteps::captures() const { return 0; }
int64_t GraphMicroSteps::replays() const { return 0; }

#else

std::string GraphMicroSteps::unsupported(const TrainOptions& o, const Run& run) {
  if (o.device != RunDevice::kCUDA) return "it needs --device cuda";
  if (!has_backend(Device::kCUDA) || backend(Device::kCUDA).cuda() == nullptr)
    return "no CUDA backend is in use";
  if (run.shape.pp != 1 || run.shape.tp != 1 || run.shape.dp != 1 || run.chunks.size() != 1)
    return absl::StrCat("it runs on one GPU without pipeline, tensor or data parallelism (this "
                        "layout: tp ", run.shape.tp, ", pp ", run.shape.pp, ", dp ", run.shape.dp,
                        ", ", run.chunks.size(), " model chunk(s))");
  if (o.table_offload) return "--table-offload reads each micro-batch's ids on the host";
  if (o.model.value_mode == ValueMode::kResformerPlus)
    return "resformer-plus reads its learned logits on the host in every pass";
  if (o.profile) return "--profile times each op with its own events";
  if (run.inject.where != FaultInjection::Where::kNone)
    return "fault injection (VTRAIN_INJECT_NONFINITE) hooks into the passes";
  return "";
}

GraphMicroSteps::GraphMicroSteps(GPT& model, ParamStore& store, int B, int64_t T, int vocab)
    : model_(model),
      store_(store),
      B_(B),
      T_(T),
      vocab_(vocab),
      ids_(Tensor::zeros({int64_t(B) * T}, DType::kI32, Device::kCUDA)),
      targets_(Tensor::zeros({int64_t(B) * T}, DType::kI32, Device::kCUDA)),
      loss_(Tensor::zeros({int64_t(B) * T}, DType::kF32, Device::kCUDA)),
      graph_(std::make_unique<CudaStepGraph>("training micro-step",
                                             *backend(Device::kCUDA).cuda())) {}

GraphMicroSteps::~GraphMicroSteps() = default;
int GraphMicroSteps::captures() const { return graph_->captures(); }
int64_t GraphMicroSteps::replays() const { return graph_->replays(); }

absl::Status GraphMicroSteps::queue(int M, float grad_scale, const FetchBatch& fetch) {
  const int64_t N = int64_t(B_) * T_;
  VT_CHECK_MSG(queued_ == 0, "GraphMicroSteps::queue: the last step's losses were not read");
  if (losses_.numel() != M * N) {  // the first step (M is the run's)
    staged_ids_ = StagedTensor(M * N, DType::kI32, Device::kCUDA);
    staged_targets_ = StagedTensor(M * N, DType::kI32, Device::kCUDA);
    losses_ = StagedTensor(M * N, DType::kF32, Device::kCUDA);
  }
  char shapes[160];
  std::snprintf(shapes, sizeof shapes, "B=%d T=%lld grad_scale=%a", B_,
                static_cast<long long>(T_), static_cast<double>(grad_scale));
  const GraphKey key{shapes,
                     {ids_.raw(), targets_.raw(), loss_.raw(), store_.params_tensor().raw(),
                      store_.grads_tensor().raw()}};
  auto body = [&] { model_.forward_backward_on_device(ids_, targets_, B_, grad_scale, loss_); };
  for (int i = 0; i < M; ++i) {
    int32_t* in = staged_ids_.host_as<int32_t>() + i * N;
    int32_t* tg = staged_targets_.host_as<int32_t>() + i * N;
    fetch(i, in, tg);
    for (int64_t n = 0; n < N; ++n) {  // as GPT::start_activations checks them
      VT_CHECK_MSG(in[n] >= 0 && in[n] < vocab_,
                   "token id " << in[n] << " outside the vocabulary [0, " << vocab_ << ")");
      VT_CHECK_MSG(tg[n] >= 0 && tg[n] < vocab_, "target id " << tg[n] << " outside the vocabulary");
    }
    staged_ids_.upload(i * N, N);
    staged_targets_.upload(i * N, N);
    ids_.copy_from(staged_ids_.device().flat(i * N, N));  // device to device: queued
    targets_.copy_from(staged_targets_.device().flat(i * N, N));
    if (!warmed_up_) {
      body();  // the first step: eager
    } else {
      const int before = graph_->captures();
      absl::Status st = graph_->run(key, body);
      if (!st.ok()) return st;
      if (graph_->captures() != before)
        std::printf("cuda graphs: captured the training micro-step (%s); replayed from now on\n",
                    shapes);
    }
    losses_.device().flat(i * N, N).copy_from(loss_);
  }
  warmed_up_ = true;
  queued_ = M;
  return absl::OkStatus();
}

double GraphMicroSteps::read_loss_sum() {
  const int64_t N = int64_t(B_) * T_;
  losses_.download(0, queued_ * N);
  losses_.wait();
  // The sum GPT::head_forward forms of its host copy, per micro-batch: in token order, in double.
  const float* l = losses_.host_as<float>();
  double loss_sum = 0.0;
  for (int i = 0; i < queued_; ++i) {
    double sum = 0.0;
    for (int64_t n = 0; n < N; ++n) sum += l[i * N + n];
    loss_sum += sum;
  }
  queued_ = 0;
  return loss_sum;
}

absl::StatusOr<double> GraphMicroSteps::run(int M, float grad_scale, const FetchBatch& fetch) {
  absl::Status st = queue(M, grad_scale, fetch);
  if (!st.ok()) return st;
  return read_loss_sum();
}

#endif  // VTRAIN_HAS_CUDA

}  // namespace vt
