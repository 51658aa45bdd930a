// A start-up estimate of one rank's memory for the chosen layout: parameters, gradients, the
// bf16 weight copy, optimizer states (Muon momentum; AdamW moments sharded over dp) and the
// activations one pipeline stage keeps (micro-batch tokens x layers x micro-batches in flight
// under 1F1B; with --vpp V the interleaved schedule's passes of layers / V each), plus the loss end's logits (alive only while the blocks' backward is not). It counts
// what the engine allocates; allocator slack, workspaces and communication buffers come on top.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/arena.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/recompute.h"
#include "parallel/process_grid.h"

namespace vt {

struct MemoryEstimate {
  double params = 0, grads = 0, compute_copy = 0, optimizer = 0, logits = 0;
  double activations = 0;          // kept from forward to backward
  double recompute_transient = 0;  // what one block's backward rebuilds (--recompute)
  double backward_transient = 0;   // one sub-layer's activation gradients, during its backward
  // --table-offload: the value tables, their gradients and AdamW states in host memory (not in
  // total()), and the rows a step reads with their gradient on the device.
  double host_tables = 0, table_rows = 0;
  // --grad-sync bf16 with dp > 1: the bf16 copies the started sums keep until the wait.
  double grad_wire = 0;
  // --fp8 e4m3: the weights' FP8 codes for the step (both layouts, 1 byte each: 2 bytes a
  // matrix element; core/ops/gemm.h Fp8WeightCacheScope), and the largest GEMM's activation
  // codes (the MLP's weight gradient: x and dh, a byte a value), alive during that GEMM.
  double fp8_weights = 0, fp8_scratch = 0;
  // --zero 2 with dp > 1 (optim/distributed_optimizer.h): the AdamW buckets packed by owner for
  // the reduce-scatter and the owned sums (f32, during backward until the optimizer step), and
  // the started gathers' send and receive buffers of the updated parameters with Muon's whole
  // orthogonalized matrices in flight (from the step to the next forward's layers; bf16 for the
  // output head's weight and, under bf16 activations, Muon's results; f32 for the rest). They
  // are never alive together: total() counts the larger.
  double zero_reduce = 0, param_gather = 0;
  // The loss end's logits and their gradient (one buffer at tp 1, where the gradient is written
  // over the logits) are freed before the blocks' backward starts
  // (GPT::head_backward), so they and the block transients are never alive together.
  double total() const {
    return params + grads + grad_wire + compute_copy + optimizer + activations + table_rows +
           fp8_weights + std::max(zero_reduce, param_gather) +
           std::max(logits, recompute_transient + backward_transient + fp8_scratch);
  }
  std::string to_string() const;  // "params 1.2 GiB | grads ... | total ..."
};

// `store` is this rank's finalized store; B the micro-batch rows. `bf16_grad_wire`: the
// data-parallel sum runs with --grad-sync bf16, whose started sums keep a bf16 copy of their
// gradients until the wait (grad_wire: 2 bytes a gradient, where dp > 1). `fp8`: --fp8 e4m3
// (fp8_weights, fp8_scratch). `zero_stage`: --zero.
MemoryEstimate estimate_memory(const ModelConfig& cfg, const ParamStore& store,
                               const GridShape& shape, const GridCoords& coords, int layers,
                               int B, DType act_dtype, Recompute recompute = Recompute::kOff,
                               int vpp = 1,
                               int micro_batches = 1, bool bf16_grad_wire = false,
                               bool fp8 = false, int zero_stage = 1);

}  // namespace vt
