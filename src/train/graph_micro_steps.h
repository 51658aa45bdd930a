// --cuda-graphs micro-step (and the micro-steps of --cuda-graphs step): the forward and backward
// of each micro-batch of a training step replayed from a CUDA graph (core/cuda_graph.h) instead of
// launched op by op.
//
// Per micro-batch the host fetches the ids into a pinned staging slice of the step (StagedTensor,
// M micro-batches long), checks them, queues their copy to the device and into the two device
// buffers the graph binds, replays the graph of GPT::forward_backward_on_device (captured on the
// second step: the first runs the same calls eagerly, which grows the runtime's scratch to its
// size, and so the capture allocates only the step's own temporaries), and queues a copy of the
// micro-batch's per-token losses into the step's loss buffer. Nothing waits for the device
// between micro-batches: read_loss_sum() reads the step's losses back once (one copy, one
// synchronization) and adds them up in the order head_forward does. The result is the eager
// path's bit for bit: the same calls on the same buffers, the same sums
// (tests/gpu/test_gpu_train_cli.py compares the two runs' losses and gradient norms).
//
// The graph's key is the micro-batch's shape, the grad scale (a kernel argument) and the
// buffers; a change re-captures. The optimizer step stays eager under micro-step; under step it
// is train/graph_optimizer_step.h's graph, which reads losses(). Where it applies: --device cuda
// on one GPU with pp = tp = dp = 1 and one model chunk, no --table-offload (host tables read the
// ids on the host), not resformer-plus (its pass reads learned logits on the host), no --profile
// (its events time ops one by one), no fault injection; unsupported() names what is in the way. A
// stop request (signal) ends the run after the current step, not between its micro-batches.
// Declared in every build; without CUDA unsupported() says so and nothing else is reached.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/staged_tensor.h"
#include "core/tensor.h"
#include "pipeline/pipeline.h"

namespace vt {

class CudaStepGraph;
class GPT;
class ParamStore;
struct Run;
struct TrainOptions;

class GraphMicroSteps {
 public:
  // Why --cuda-graphs micro-step cannot run with these options and this run ("" when it can).
  static std::string unsupported(const TrainOptions& o, const Run& run);

  // B rows of T tokens per micro-batch.
  GraphMicroSteps(GPT& model, ParamStore& store, int B, int64_t T, int vocab);
  ~GraphMicroSteps();

  // Queues the step's M micro-batches (forward + backward, gradients accumulated into the
  // store, per-token losses into losses()); the graph's error (named) if it cannot.
  absl::Status queue(int M, float grad_scale, const FetchBatch& fetch);
  // The queued step's per-token losses on the device, micro-batch after micro-batch (M B T f32).
  const Tensor& losses() const { return losses_.device(); }
  // The sum of the queued step's token losses: one copy back, one synchronization.
  double read_loss_sum();
  // queue(), then read_loss_sum().
  absl::StatusOr<double> run(int M, float grad_scale, const FetchBatch& fetch);

  int captures() const;
  int64_t replays() const;

 private:
  GPT& model_;
  ParamStore& store_;
  int B_;
  int64_t T_;
  int vocab_;
  Tensor ids_, targets_, loss_;  // device, kept for the run: the graph reads and writes them
  StagedTensor staged_ids_, staged_targets_, losses_;  // the step's M micro-batches
  int queued_ = 0;  // micro-batches in losses_ not read yet
  std::unique_ptr<CudaStepGraph> graph_;
  bool warmed_up_ = false;
};

}  // namespace vt
