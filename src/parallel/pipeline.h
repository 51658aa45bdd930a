// PipelineEngine: runs one training step (or an evaluation pass) of a GPT stage over M
// micro-batches with the 1F1B schedule (warm-up of pp - stage - 1 forwards, then one forward / one
// backward, then the cool-down backwards), so at most pp - stage micro-batches keep their
// activations on this stage. Between stages it sends the bundle (docs/design.md "Parallelism"): the
// residual stream, x0 for x0v, and the context values later layers read (V1; every earlier value
// for resformer-dense), DenseFormer's earlier block outputs that later averages read, and in
// backward their gradients. With pp = 1 it is plain gradient accumulation. Token ids are read on
// every stage by `fetch`, never sent.
#pragma once
#include <functional>
#include <vector>

#include "model/gpt.h"
#include "parallel/process_grid.h"

namespace vt {

// Fills micro-batch i's ids: inputs and targets, B*T each.
using FetchBatch = std::function<void(int micro, int32_t* inputs, int32_t* targets)>;
// Called on the last stage for every micro-batch after its loss was computed.
using OnLoss = std::function<void(const Activations& acts)>;

class PipelineEngine {
 public:
  PipelineEngine(GPT& model, const ProcessGrid& grid);
  GPT& model() const { return model_; }

  // Forward and backward of M micro-batches of B rows; parameter gradients accumulate with
  // d loss_sum * grad_scale. Returns the sum of token losses on the last stage (0 elsewhere).
  // on_last_layer_grads (optional) is called with each layer index as soon as that layer's
  // gradients are complete, i.e. during the last micro-batch's backward.
  double train_step(int M, int B, float grad_scale, const FetchBatch& fetch,
                    const std::function<void(int)>& on_last_layer_grads = {});
  // Forward only. Returns the loss sum on the last stage (0 elsewhere); on_loss sees each
  // micro-batch's activations there.
  double forward_only(int M, int B, const FetchBatch& fetch, const OnLoss& on_loss = {});

  // Stop requests between micro-batches: before each forward, the first stage's ranks (tp x dp)
  // vote with `check` (e.g. "a stop signal arrived") and pass the decision down the pipeline
  // with the micro-batch; when any votes to stop, train_step / forward_only end the forwards
  // there on every rank, finish the backwards in flight and return early, and stopped() says
  // so (the step's gradients are partial: discard them; on_last_layer_grads is not called).
  // So a stop is honoured within one micro-batch's pass through the pipeline, whatever M.
  void set_stop_check(std::function<bool()> check) { stop_check_ = std::move(check); }
  bool stopped() const { return stopped_; }

  // The tensors crossing the boundary in front of layer `boundary` (shapes for B rows).
  struct Slot {
    enum Kind { kX, kX0, kValue, kDense } kind;
    int layer;  // kValue: the layer whose context value; kDense: j of DenseFormer's x_j
  };
  std::vector<Slot> boundary_slots(int boundary) const;

 private:
  bool next_forward(int i);  // the stop vote before forward i (see set_stop_check)
  void forward_micro(int i, int B, const FetchBatch& fetch, const OnLoss& on_loss, bool keep,
                     double& loss_sum);
  void backward_micro(float grad_scale, const std::function<void(int)>& layer_hook);
  int64_t slot_numel(const Slot& s, int B) const;
  void send_bundle(const Bundle& b, int boundary, int B, int peer, int tag);
  Bundle recv_bundle(int boundary, int B, int peer, int tag);

  GPT& model_;
  const ProcessGrid& grid_;
  std::vector<int32_t> in_, tg_;
  std::vector<Activations> inflight_;  // FIFO of micro-batches awaiting backward
  size_t max_inflight_ = 0;
  std::function<bool()> stop_check_;
  bool stopped_ = false;
};

}  // namespace vt
