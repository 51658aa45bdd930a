// PipelineEngine: runs one training step (or an evaluation pass) of a GPT stage over M
// micro-batches with the 1F1B schedule (warm-up of pp - stage - 1 forwards, then one forward / one
// backward, then the cool-down backwards), so at most pp - stage micro-batches keep their
// activations on this stage. With model chunks (--vpp V > 1, GPT::num_chunks) it runs
// Megatron-LM's interleaved 1F1B: rank r holds virtual stages r, r + pp, ...; the micro-batches go
// through the chunks in groups of pp (M must be a multiple of pp), and the bubble shrinks from
// (pp - 1) / M to (pp - 1) / (V M) of the ideal step, for more messages (the last rank's chunk c
// feeds the first rank's chunk c + 1) and more activations in flight (interleaved_1f1b below).
// Between stages it sends the bundle (docs/design.md "Parallelism"): the
// residual stream, x0 for x0v, and the context values later layers read (V1; every earlier value
// for resformer-dense), DenseFormer's earlier block outputs that later averages read, and in
// backward their gradients. With pp = 1 it is plain gradient accumulation. Token ids are read on
// every stage by `fetch`, never sent; with value tables kept in host memory (--table-offload)
// every micro-batch's ids are read before the first forward, so the table rows they need are
// on the device before the pass starts (model/table_rows.h).
#pragma once
#include <functional>
#include <vector>

#include "model/gpt.h"
#include "parallel/process_grid.h"

namespace vt {

// Fills micro-batch i's ids: inputs and targets, B*T each. Called once per micro-batch, in
// increasing i, on every stage (with model chunks: by the micro-batch's first pass there).
using FetchBatch = std::function<void(int micro, int32_t* inputs, int32_t* targets)>;
// Called on the last stage for every micro-batch after its loss was computed.
using OnLoss = std::function<void(const Activations& acts)>;

// One step of a pipeline rank's schedule: the forward or backward pass of model chunk `chunk` of
// micro-batch `micro`.
struct PipelineOp {
  bool forward = true;
  int chunk = 0, micro = 0;
};
// The 1F1B order of pipeline rank `stage` for M micro-batches and vpp chunks per rank. vpp = 1:
// pp - stage - 1 warm-up forwards, then one forward / one backward, then the cool-down. vpp > 1
// (M a multiple of pp): Megatron-LM's interleaved order: forward k runs chunk (k mod (pp vpp)) / pp
// of micro-batch (k / (pp vpp)) pp + k mod pp, backward k the chunks in reverse; warm-up
// (pp - stage - 1) 2 + (vpp - 1) pp forwards (all of them when M = pp).
std::vector<PipelineOp> interleaved_1f1b(int pp, int vpp, int M, int stage);

// The step time the schedule gives when every pass takes what it took (pass_s[r][k]: rank r's
// k-th pass of interleaved_1f1b(pp, vpp, M, r)) and every rank has a core of its own and
// messages take no time: each pass starts once its rank is free and the pass feeding it (the
// previous virtual stage's forward; the next one's backward, or its own forward on the last
// virtual stage) has finished. With forwards of f / vpp and backwards of b / vpp it is
// (M + (pp - 1) / vpp) (f + b): Megatron's bubble.
double replay_step_seconds(int pp, int vpp, int M, const std::vector<std::vector<double>>& pass_s);

class PipelineEngine {
 public:
  PipelineEngine(GPT& model, const ProcessGrid& grid);
  GPT& model() const { return model_; }

  // Forward and backward of M micro-batches of B rows; parameter gradients accumulate with
  // d loss_sum * grad_scale. Returns the sum of token losses on the last stage (0 elsewhere).
  // hooks.block_output sees every forward pass's block outputs; hooks.layer_grads_done is
  // called with each layer index as soon as that layer's gradients are complete, i.e. during
  // the last micro-batch's backward.
  double train_step(int M, int B, float grad_scale, const FetchBatch& fetch,
                    const PassHooks& hooks = {});
  // Forward only. Returns the loss sum on the last stage (0 elsewhere); on_loss sees each
  // micro-batch's activations there, hooks.block_output every block's output.
  double forward_only(int M, int B, const FetchBatch& fetch, const OnLoss& on_loss = {},
                      const PassHooks& hooks = {});

  // Stop requests between micro-batches: before each forward, the first stage's ranks (tp x dp)
  // vote with `check` (e.g. "a stop signal arrived") and pass the decision down the pipeline
  // with the micro-batch; when any votes to stop, train_step / forward_only end the forwards
  // there on every rank, finish the backwards in flight and return early, and stopped() says
  // so (the step's gradients are partial: discard them; on_last_layer_grads is not called).
  // So a stop is honoured within one micro-batch's pass through the pipeline, whatever M.
  void set_stop_check(std::function<bool()> check) { stop_check_ = std::move(check); }
  bool stopped() const { return stopped_; }

  // Where the last train_step's time went, over the pipeline ranks (train_step reduces it over
  // the pp group when its schedule ends; all zero after a stopped step): waiting for another
  // stage's bundle or control message (the bubble, plus transfer time) and everything else, each
  // averaged over the pipeline ranks; with pp > 1 also a rank's passes' own time (waits left
  // out) averaged over the ranks, the busiest rank's, and the schedule replayed with every
  // rank's measured passes (replay_step_seconds: the bubble of the schedule itself, apart from
  // ranks sharing cores; against pass_max_s it is the critical rank's idle share).
  struct StepTimes {
    double wait_s = 0, busy_s = 0;
    double pass_s = 0, pass_max_s = 0, replay_s = 0;
  };
  const StepTimes& last_step_times() const { return times_; }

  // The tensors crossing the boundary in front of layer `boundary` (shapes for B rows).
  struct Slot {
    enum Kind { kX, kX0, kValue, kDense } kind;
    int layer;  // kValue: the layer whose context value; kDense: j of DenseFormer's x_j
  };
  std::vector<Slot> boundary_slots(int boundary) const;

 private:
  // With value tables kept in host memory: reads all M micro-batches' ids and puts the rows
  // they touch on the device (GPT::prepare_table_rows); forward_micro then uses those ids.
  void prepare_tables(int M, int B, const FetchBatch& fetch, bool with_grads);
  bool next_forward(int i);  // the stop vote before micro-batch i's first forward (set_stop_check)
  // `keep`: a training pass (its activations kept for backward_micro with `grad_scale`, which
  // the loss end may use already: GPT::head_forward).
  void forward_micro(int i, int chunk, int B, const FetchBatch& fetch, const OnLoss& on_loss,
                     const PassHooks& hooks, bool keep, double& loss_sum, float grad_scale = 0.0f);
  void backward_micro(int chunk, float grad_scale, const PassHooks& hooks);
  // The pipeline rank that sends chunk c its input (-1: none, the chunk starts with the
  // embedding) and the one chunk c sends its output to (-1: none, it ends with the loss).
  int prev_rank(int chunk) const;
  int next_rank(int chunk) const;
  int64_t slot_numel(const Slot& s, int B) const;
  // Messages are tagged by the boundary they cross (a layer index) and their direction, so the
  // forward and backward streams between two ranks (both ways round the ring with vpp > 1 and
  // pp = 2) never match each other's receives.
  static int tag_of(int boundary, bool forward) { return 100 + 2 * boundary + (forward ? 0 : 1); }
  void send_bundle(const Bundle& b, int boundary, int B, int peer, bool forward);
  Bundle recv_bundle(int boundary, int B, int peer, bool forward);

  GPT& model_;
  const ProcessGrid& grid_;
  std::vector<std::vector<int32_t>> ids_;  // [micro]: inputs then targets, until its last forward
  std::vector<std::vector<Activations>> inflight_;  // per chunk, FIFO of passes awaiting backward
  size_t inflight_total_ = 0, max_inflight_ = 0;
  std::function<bool()> stop_check_;
  bool stopped_ = false;
  bool prefetched_ = false;  // ids_ holds every micro-batch's ids (prepare_tables)
  // This rank's times during a train_step, reduced into times_ at its end.
  struct RankTimes {
    double wait_s = 0, busy_s = 0;
    std::vector<double> pass_s;  // each pass's own time (its waits left out), in schedule order
  };
  StepTimes reduce_times(int M) const;
  RankTimes rank_times_;
  StepTimes times_;
};

}  // namespace vt
