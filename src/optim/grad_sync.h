// Gradient synchronization and the global gradient norm on a dp x tp x pp layout (docs/design.md
// "Parallelism"). all_reduce_grads sums the flat grad arena over the data-parallel group in
// fixed contiguous buckets; the grad-norm helpers count every element of the whole model exactly
// once whatever the layout, so the norm (and clipping) equals the single-process one. Both work
// on a store on any device (Tensor collectives and ops::sum_squares on the gradient views).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/communicator.h"
#include "parallel/process_grid.h"

namespace vt::optim {

// The wire format of the data-parallel sum (--grad-sync): DType::kF32, the f32 all-reduce (the
// default), or DType::kBF16, Communicator::all_reduce_sum_bf16 (each rank's gradient rounded to
// bf16, fp32 additions rounded to bf16, the result widened back into the f32 arena; a group of
// one rounds too). Parameters kept in host memory (--table-offload) follow the same rule.
// These are ZeRO-1's all-reduces (every replica gets the whole sum); ZeRO-2's reduce into the
// owners of the optimizer state is DistributedOptimizer::reduce_grads (same wire rule).

// Sums the whole grad arena over `dp` (in place), in contiguous buckets of at most bucket_elems
// floats issued in arena order. The trainer scales gradients by 1 / global-batch-tokens, so the
// sum over DP ranks is the full gradient. With the f32 wire, no-op for a group of size 1.
// Collective over `dp`.
void all_reduce_grads(ParamStore& store, Communicator* dp, int64_t bucket_elems = 4 << 20,
                      DType wire = DType::kF32);

// The data-parallel gradient sum overlapped with backward. Each layer's parameters occupy one
// contiguous range of the arena (they are registered together); layer_done(i) starts the
// non-blocking sum of layer i's range (call it once that layer's gradients are final, i.e. after
// the last micro-batch's backward of the layer); finish() sums the rest of the arena (embedding,
// head, parameters shared by stages, which must already be summed over pp) in buckets and
// waits for everything. The result equals all_reduce_grads's. Collective over `dp`, with every
// rank calling layer_done in the same order.
class OverlappedGradSync {
 public:
  OverlappedGradSync(ParamStore* store, Communicator* dp, int64_t bucket_elems = 4 << 20,
                     DType wire = DType::kF32);
  void layer_done(int layer);
  // Starts the sum of the output head's gradient (ParamGroup::kLmHead): call it once that
  // gradient is final, right after the head's backward of the last micro-batch (the whole
  // backward then runs behind it). Without the call finish() sums it.
  void head_done();
  void finish();

 private:
  struct Range {
    int64_t lo = 0, hi = 0;
  };
  ParamStore* store_;
  Communicator* dp_;
  int64_t bucket_;
  DType wire_;
  bool skip() const { return dp_->size() == 1 && wire_ == DType::kF32; }
  // One range summed in the wire format: blocking, or started (completed by all_reduce_wait).
  void sum(const Tensor& t) const;
  void start(const Tensor& t) const;
  std::vector<std::pair<int, Range>> layers_;  // layer -> its arena range
  std::vector<Range> head_;                    // the output head's parameters
  std::vector<Range> rest_;                    // everything else, in arena order
  std::vector<uint8_t> started_;               // per entry of layers_, this step
  bool head_started_ = false;                  // this step
};

// For each parameter of the store: does this rank count its squared gradient in the global norm?
//   - split across TP (split.axis >= 0): every TP rank counts its own shard;
//   - replicated across TP: TP rank 0 only;
//   - PP-replicated (ParamInfo::pp_replicated): only the lowest pipeline stage that holds it.
// Collective over grid.pp() (finds which stages hold the PP-replicated parameters).
std::vector<uint8_t> grad_norm_mask(const ParamStore& store, const ProcessGrid& grid);

// sqrt of the sum over the whole model of squared gradients: masked local sum (double), summed
// over tp, then over pp. DP replicas hold identical gradients after all_reduce_grads and all get
// the same value. Collective over grid.tp() and grid.pp().
double global_grad_norm(const ParamStore& store, const ProcessGrid& grid,
                        const std::vector<uint8_t>& mask);
// The gradients global_grad_norm sums, in its order: those on the store's device (`device`) and
// those kept in host memory (`host`; empty when the store is on the CPU: they are in `device`).
void grad_norm_parts(const ParamStore& store, const std::vector<uint8_t>& mask,
                     std::vector<Tensor>* device, std::vector<Tensor>* host);

}  // namespace vt::optim
