// --cuda-graphs micro-step: the forward and backward of each micro-batch of a training step
// replayed from a CUDA graph (core/cuda_graph.h) instead of launched op by op.
//
// Per micro-batch the host fetches the ids, checks them and copies them into two device buffers
// that live for the run, then replays the graph of GPT::forward_backward_on_device (captured on
// the second step: the first runs the same calls eagerly, which grows the runtime's scratch to
// its size, and so the capture allocates only the step's own temporaries), then reads the
// micro-batch's per-token losses back and adds them up in the order head_forward does. The
// result is the eager path's bit for bit: the same calls on the same buffers, the same sums
// (tests/gpu/test_gpu_train_cli.py compares the two runs' losses and gradient norms).
//
// The graph's key is the micro-batch's shape, the grad scale (a kernel argument) and the
// buffers; a change re-captures. The optimizer step, the gradient norm and everything else of
// the step stay eager. Where it applies: --device cuda on one GPU with pp = tp = dp = 1 and one
// model chunk, no --table-offload (host tables read the ids on the host), not resformer-plus
// (its pass reads learned logits on the host), no --profile (its
// events time ops one by one), no fault injection; unsupported() names what is in the way. A
// stop request (signal) ends the run after the current step, not between its micro-batches.
// Declared in every build; without CUDA unsupported() says so and nothing else is reached.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
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

  // The step's M micro-batches (forward + backward, gradients accumulated into the store);
  // returns the sum of their token losses, or the graph's error (named).
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
  std::unique_ptr<CudaStepGraph> graph_;
  bool warmed_up_ = false;
};

}  // namespace vt
