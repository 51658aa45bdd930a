// Data-parallel gradient all-reduce in buckets, and the layout-independent global grad norm.
#include "optim/grad_sync.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>

#include "core/check.h"
#include "core/ops.h"
#include "core/rng.h"
#include "optim/clip.h"

namespace vt::optim {

namespace {

void check_wire(DType wire) {
  VT_CHECK_MSG(wire == DType::kF32 || wire == DType::kBF16,
               "the gradient sum's wire is f32 or bf16, got " << dtype_name(wire));
}

void sum_in(Communicator* dp, const Tensor& t, DType wire) {
  if (wire == DType::kBF16)
    dp->all_reduce_sum_bf16(t);
  else
    dp->all_reduce_sum(t);
}

}  // namespace

void all_reduce_grads(ParamStore& store, Communicator* dp, int64_t bucket_elems, DType wire) {
  VT_CHECK(dp != nullptr);
  VT_CHECK_MSG(store.finalized(), "all_reduce_grads needs a finalized ParamStore");
  VT_CHECK_MSG(bucket_elems > 0, "bucket_elems must be positive, got " << bucket_elems);
  check_wire(wire);
  if (dp->size() == 1 && wire == DType::kF32) return;
  // The padding between parameters is zero on every rank, so the whole arena can be summed.
  const Tensor g = store.grads_tensor();
  const int64_t total = store.total_numel();
  for (int64_t lo = 0; lo < total; lo += bucket_elems) {
    sum_in(dp, g.flat(lo, std::min(bucket_elems, total - lo)), wire);
  }
  const Tensor h = store.host_grads_tensor();  // parameters kept in host memory
  for (int64_t lo = 0; lo < store.host_numel(); lo += bucket_elems)
    sum_in(dp, h.flat(lo, std::min(bucket_elems, store.host_numel() - lo)), wire);
}

void OverlappedGradSync::sum(const Tensor& t) const { sum_in(dp_, t, wire_); }

void OverlappedGradSync::start(const Tensor& t) const {
  if (wire_ == DType::kBF16)
    dp_->all_reduce_sum_bf16_start(t);
  else
    dp_->all_reduce_sum_start(t);
}

OverlappedGradSync::OverlappedGradSync(ParamStore* store, Communicator* dp, int64_t bucket_elems,
                                       DType wire)
    : store_(store), dp_(dp), bucket_(bucket_elems), wire_(wire) {
  VT_CHECK(store_ && store_->finalized() && dp_ && bucket_ > 0);
  check_wire(wire_);
  // Each parameter spans [offset, next offset) (its padding included); a layer's range is the
  // union of its parameters' spans, which registration makes contiguous.
  // Parameters kept in host memory are summed by finish(), over their own arena.
  std::vector<int> order;
  for (int i = 0; i < store_->size(); ++i)
    if (!store_->info(i).host) order.push_back(i);
  const int n = static_cast<int>(order.size());
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return store_->info(a).offset < store_->info(b).offset; });
  int64_t cursor = 0;
  for (int k = 0; k < n; ++k) {
    const ParamInfo& p = store_->info(order[k]);
    const int64_t hi = k + 1 < n ? store_->info(order[k + 1]).offset : store_->total_numel();
    const int layer = p.layer;
    if (layer >= 0 && !layers_.empty() && layers_.back().first == layer &&
        layers_.back().second.hi == p.offset) {
      layers_.back().second.hi = hi;
    } else if (layer >= 0) {
      for (const auto& l : layers_)
        VT_CHECK_MSG(l.first != layer, "layer " << layer << "'s parameters are not contiguous");
      layers_.push_back({layer, Range{p.offset, hi}});
    } else {
      // The head (not shared over the pipeline: those are summed over pp first) on its own.
      std::vector<Range>& to =
          p.group == ParamGroup::kLmHead && !p.pp_replicated ? head_ : rest_;
      if (!to.empty() && to.back().hi == p.offset)
        to.back().hi = hi;
      else
        to.push_back(Range{p.offset, hi});
    }
    cursor = hi;
  }
  (void)cursor;
  started_.assign(layers_.size(), 0);
}

void OverlappedGradSync::layer_done(int layer) {
  if (skip()) return;
  for (size_t k = 0; k < layers_.size(); ++k) {
    if (layers_[k].first != layer) continue;
    VT_CHECK_MSG(!started_[k], "layer " << layer << "'s gradient sum started twice");
    started_[k] = 1;
    const Range& r = layers_[k].second;
    start(store_->grads_tensor().flat(r.lo, r.hi - r.lo));
    return;
  }
}

void OverlappedGradSync::head_done() {
  if (skip()) return;
  VT_CHECK_MSG(!head_started_, "the head's gradient sum started twice");
  head_started_ = true;
  for (const Range& r : head_) start(store_->grads_tensor().flat(r.lo, r.hi - r.lo));
}

void OverlappedGradSync::finish() {
  if (skip()) return;
  const Tensor g = store_->grads_tensor();
  if (!head_started_)
    for (const Range& r : head_)
      for (int64_t lo = r.lo; lo < r.hi; lo += bucket_)
        sum(g.flat(lo, std::min(bucket_, r.hi - lo)));
  // Layers whose hook did not run (none in a normal step) are summed here, in layer order.
  for (size_t k = 0; k < layers_.size(); ++k)
    if (!started_[k]) {
      const Range& r = layers_[k].second;
      start(g.flat(r.lo, r.hi - r.lo));
    }
  for (const Range& r : rest_)
    for (int64_t lo = r.lo; lo < r.hi; lo += bucket_)
      sum(g.flat(lo, std::min(bucket_, r.hi - lo)));
  const Tensor h = store_->host_grads_tensor();
  for (int64_t lo = 0; lo < store_->host_numel(); lo += bucket_)
    sum(h.flat(lo, std::min(bucket_, store_->host_numel() - lo)));
  dp_->all_reduce_wait();
  std::fill(started_.begin(), started_.end(), 0);
  head_started_ = false;
}

std::vector<uint8_t> grad_norm_mask(const ParamStore& store, const ProcessGrid& grid) {
  const int n = store.size();
  const int pp = grid.shape().pp;
  const int stage = grid.coords().pp;
  const bool tp_rank0 = grid.coords().tp == 0;
  // Which stages hold each PP-replicated parameter (ParamInfo::pp_replicated): every stage writes
  // a 52-bit hash of each such name (exact in a double) into its own row of a pp x slots table,
  // summed over pp so that every stage sees every row.
  std::vector<int> shared;
  for (int i = 0; i < n; ++i)
    if (store.info(i).pp_replicated) shared.push_back(i);
  double slots = static_cast<double>(shared.size());
  std::vector<double> counts(pp, 0.0);
  counts[stage] = slots;
  grid.pp()->all_reduce_sum(counts.data(), pp);
  const int64_t width = static_cast<int64_t>(*std::max_element(counts.begin(), counts.end()));
  auto key = [&](int i) {
    return static_cast<double>(fnv1a64(store.info(i).name) & ((uint64_t{1} << 52) - 1)) + 1.0;
  };
  std::vector<double> held(static_cast<size_t>(pp * width), 0.0);
  for (size_t k = 0; k < shared.size(); ++k) held[stage * width + k] = key(shared[k]);
  if (width > 0) grid.pp()->all_reduce_sum(held.data(), static_cast<int64_t>(held.size()));

  std::vector<uint8_t> mask(n, 0);
  for (int i = 0; i < n; ++i) {
    const ParamInfo& info = store.info(i);
    bool counted = info.split.axis >= 0 || tp_rank0;
    if (info.pp_replicated) {
      int lowest = -1;
      for (int s = 0; s < pp && lowest < 0; ++s)
        for (int64_t k = 0; k < width; ++k)
          if (held[s * width + k] == key(i)) lowest = s;
      VT_CHECK(lowest >= 0);
      counted = counted && lowest == stage;
    }
    mask[i] = counted ? 1 : 0;
  }
  return mask;
}

void grad_norm_parts(const ParamStore& store, const std::vector<uint8_t>& mask,
                     std::vector<Tensor>* device, std::vector<Tensor>* host) {
  VT_CHECK(static_cast<int>(mask.size()) == store.size());
  // Parameters kept in host memory are summed apart, unless the store is on the CPU too (then in
  // the same order as without).
  const bool split = store.device() != Device::kCPU;
  for (int i = 0; i < store.size(); ++i)
    if (mask[i]) (split && store.info(i).host ? *host : *device).push_back(store.grad(i));
}

double global_grad_norm(const ParamStore& store, const ProcessGrid& grid,
                        const std::vector<uint8_t>& mask) {
  VT_CHECK(static_cast<int>(mask.size()) == store.size());
  // One device synchronization for the whole store.
  std::vector<Tensor> counted, host_kept;
  grad_norm_parts(store, mask, &counted, &host_kept);
  double s = ops::sum_squares_list(counted) + ops::sum_squares_list(host_kept);
  grid.tp()->all_reduce_sum(&s, 1);
  grid.pp()->all_reduce_sum(&s, 1);
  return std::sqrt(s);
}

}  // namespace vt::optim
