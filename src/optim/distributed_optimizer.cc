// DistributedOptimizer: layout plans (Muon owners, ZeRO-1 chunks), the distributed Muon and
// ZeRO-1 AdamW steps on the store's device, and checkpoint gather/scatter of the sharded states.
#include "optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/ops.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/grad_sync.h"
#include "optim/schedule.h"

namespace vt::optim {

namespace {
// Per-rank floats of one ZeRO-1 all-gather bucket (the gathered buffer is dp times this).
constexpr int64_t kGatherBucket = int64_t{4} << 20;
}  // namespace

std::vector<int> muon_owners(const std::vector<int64_t>& elements, int ranks) {
  VT_CHECK_MSG(ranks >= 1, "muon_owners: " << ranks << " ranks");
  std::vector<size_t> order(elements.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return elements[a] > elements[b]; });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(elements.size(), 0);
  for (size_t k : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals
    owner[k] = static_cast<int>(least - load.begin());
    *least += elements[k];
  }
  return owner;
}

DistributedOptimizer::DistributedOptimizer(ParamStore* store, OptimizerConfig config,
                                           const ProcessGrid& grid, int zero_stage)
    : store_(store),
      config_(config),
      zero_stage_(zero_stage),
      grid_(grid),
      coeffs_(NsCoefficients::of(config.muon.ns)) {
  VT_CHECK(store_ != nullptr);
  VT_CHECK_MSG(zero_stage_ == 1 || zero_stage_ == 2,
               "the ZeRO stage is 1 or 2, got " << zero_stage_);
  VT_CHECK_MSG(store_->finalized(), "DistributedOptimizer needs a finalized ParamStore");
  VT_CHECK_MSG(config_.muon.ns_steps >= 1, "Muon ns_steps must be >= 1");
  const int tp = grid_.shape().tp, dp = grid_.shape().dp;
  const int tp_rank = grid_.coords().tp, dp_rank = grid_.coords().dp;
  const int stage_size = grid_.stage()->size();
  VT_CHECK(grid_.tp()->size() == tp && grid_.dp()->size() == dp && stage_size == tp * dp);

  plan_of_.assign(store_->size(), -1);
  int64_t momentum_size = 0, adam_size = 0, adam_host_size = 0;
  double matrix_numel = 0;
  for (int i = 0; i < store_->size(); ++i) {
    const ParamInfo& info = store_->info(i);
    if (config_.uses_muon(info.group)) {
      VT_CHECK_MSG(info.shape.size() == 2 && info.global_shape.size() == 2,
                   "Muon parameter " << info.name << " must be 2-D, has local shape "
                                     << shape_str(info.shape) << ", global "
                                     << shape_str(info.global_shape));
      const int ax = info.split.axis;
      VT_CHECK_MSG(ax >= -1 && ax <= 1, "bad split axis " << ax << " of " << info.name);
      for (int d = 0; d < 2; ++d) {
        const int64_t want =
            d == ax ? info.global_shape[d] / tp : info.global_shape[d];
        VT_CHECK_MSG(info.shape[d] == want && (d != ax || info.global_shape[d] % tp == 0),
                     "Muon parameter " << info.name << ": local " << shape_str(info.shape)
                                       << " is not an even " << tp << "-way TP split of global "
                                       << shape_str(info.global_shape) << " along axis " << ax);
      }
      if (ax >= 0) {
        VT_CHECK_MSG(info.split.offset == tp_rank * info.shape[ax],
                     "Muon parameter " << info.name << ": TP rank " << tp_rank
                                       << " holds offset " << info.split.offset << ", expected "
                                       << tp_rank * info.shape[ax]);
      }
      MatrixPlan m;
      m.param = i;
      m.rows = info.global_shape[0];
      m.cols = info.global_shape[1];
      matrix_numel += static_cast<double>(m.rows * m.cols);
      plan_of_[i] = static_cast<int>(matrices_.size());
      matrices_.push_back(m);
    } else {
      AdamPlan a;
      a.param = i;
      a.host = info.host;
      const int64_t n = info.numel();
      a.chunk = (n + dp - 1) / dp;
      a.lo = std::min(n, a.chunk * dp_rank);
      a.hi = std::min(n, a.lo + a.chunk);
      int64_t& size = a.host ? adam_host_size : adam_size;
      a.state = size;
      size += a.hi - a.lo;
      a.bf16 = zero_stage_ == 2 && info.group == ParamGroup::kLmHead && !a.host &&
               store_->compute_dtype() == DType::kBF16;
      if (buckets_.empty() || buckets_.back().host != a.host || buckets_.back().bf16 != a.bf16 ||
          (buckets_.back().size > 0 && buckets_.back().size + a.chunk > kGatherBucket)) {
        Bucket b;
        b.begin = b.end = static_cast<int>(adam_.size());
        b.host = a.host;
        b.bf16 = a.bf16;
        buckets_.push_back(b);
      }
      a.pack = buckets_.back().size;
      buckets_.back().size += a.chunk;
      buckets_.back().end = static_cast<int>(adam_.size()) + 1;
      // The forward reads a block's parameters at its layer, the output head's at the head, the
      // rest (embedding, shared) first.
      const int need = info.layer >= 0                                           ? info.layer
                       : info.group == ParamGroup::kLmHead && !info.pp_replicated ? kHeadLayer
                                                                                 : -1;
      buckets_.back().need = std::min(buckets_.back().need, need);
      plan_of_[i] = static_cast<int>(adam_.size());
      adam_.push_back(a);
    }
  }
  // Owners balanced by elements (muon_owners); only the owner's DP replica keeps the momentum
  // (its TP group gathers the matrix).
  std::vector<int64_t> elements;
  for (const MatrixPlan& m : matrices_) elements.push_back(m.rows * m.cols);
  const std::vector<int> owners = muon_owners(elements, stage_size);
  for (size_t k = 0; k < matrices_.size(); ++k) {
    MatrixPlan& m = matrices_[k];
    m.owner = owners[k];
    m.held = m.owner / tp == dp_rank;
    if (m.held) {
      m.state = momentum_size;
      momentum_size += store_->info(m.param).numel();
    }
  }
  plan_muon_rounds();
  const Device dev = store_->device();
  momentum_ = Tensor::zeros({momentum_size}, DType::kF32, dev);
  update_ = Tensor::zeros({momentum_size}, DType::kF32, dev);
  exp_avg_ = Tensor::zeros({adam_size}, DType::kF32, dev);
  exp_avg_sq_ = Tensor::zeros({adam_size}, DType::kF32, dev);
  exp_avg_host_ = Tensor::zeros({adam_host_size}, DType::kF32, Device::kCPU);
  exp_avg_sq_host_ = Tensor::zeros({adam_host_size}, DType::kF32, Device::kCPU);
  // The step's scalars: the guard, a slot per AdamW group in use, Muon's momentum, a slot per
  // matrix.
  int64_t floats = kGuardFloats;
  auto slot = [&floats](size_t bytes) {
    const int64_t at = floats;
    floats += static_cast<int64_t>(bytes / sizeof(float));
    return at;
  };
  for (const AdamPlan& a : adam_) {
    const size_t g = static_cast<size_t>(store_->info(a.param).group);
    if (adam_coefs_.size() <= g) adam_coefs_.resize(g + 1, -1);
    if (adam_coefs_[g] < 0) adam_coefs_[g] = slot(sizeof(AdamWCoefs));
  }
  momentum_coefs_ = slot(sizeof(MuonMomentumCoefs));
  for (MatrixPlan& m : matrices_) m.coefs = slot(sizeof(MuonApplyCoefs));
  scalars_ = StagedTensor(floats, DType::kF32, dev);

  // Every rank of the stage must plan the same matrices in the same order (the broadcasts of the
  // step pair up by position): compare counts and sizes over the stage group.
  double mine[2] = {static_cast<double>(matrices_.size()), matrix_numel};
  double sum[2] = {mine[0], mine[1]};
  grid_.stage()->all_reduce_sum(sum, 2);
  VT_CHECK_MSG(sum[0] == mine[0] * stage_size && sum[1] == mine[1] * stage_size,
               "ranks of pipeline stage " << grid_.coords().pp
                                          << " hold different block matrices (this rank: "
                                          << matrices_.size() << ")");
  norm_mask_ = grad_norm_mask(*store_, grid_);
  final_.assign(static_cast<size_t>(store_->size()), 0);
  bucket_started_.assign(buckets_.size(), 0);
  matrix_started_.assign(matrices_.size(), 0);
  reduce_send_.assign(buckets_.size(), Tensor());
  reduce_recv_.assign(buckets_.size(), Tensor());
  gather_send_.assign(buckets_.size(), Tensor());
  gather_recv_.assign(buckets_.size(), Tensor());
  gather_mark_.assign(buckets_.size(), 0);
  muon_pending_.assign(matrices_.size(), MuonPending{});
}

DistributedOptimizer::~DistributedOptimizer() { finish_param_gathers(); }

void DistributedOptimizer::set_step_count(int64_t t) {
  VT_CHECK_MSG(t >= 0, "step count must be >= 0, got " << t);
  step_count_ = t;
}

StepStats DistributedOptimizer::step(int64_t step_index, int64_t total_steps) {
  return step(step_index, total_steps, grad_norm());
}

double DistributedOptimizer::grad_norm() {
  if (zero_stage_ == 2) return owned_grad_norm();
  return global_grad_norm(*store_, grid_, norm_mask_);
}

void DistributedOptimizer::norm_parts(std::vector<Tensor>* device, std::vector<Tensor>* host) const {
  if (zero_stage_ == 1) {
    grad_norm_parts(*store_, norm_mask_, device, host);
    return;
  }
  // Device parts and parameters kept in host memory apart (as global_grad_norm does).
  const bool split = store_->device() != Device::kCPU;
  for (const AdamPlan& a : adam_)
    if (norm_mask_[a.param] && a.hi > a.lo)
      (split && a.host ? *host : *device).push_back(store_->grad(a.param).flat(a.lo, a.hi - a.lo));
  for (const MatrixPlan& m : matrices_)
    if (norm_mask_[m.param] && m.held) device->push_back(store_->grad(m.param));
}

double DistributedOptimizer::owned_grad_norm() const {
  std::vector<Tensor> device_parts, host_parts;
  norm_parts(&device_parts, &host_parts);
  double s = ops::sum_squares_list(device_parts) + ops::sum_squares_list(host_parts);
  grid_.dp()->all_reduce_sum(&s, 1);
  grid_.tp()->all_reduce_sum(&s, 1);
  grid_.pp()->all_reduce_sum(&s, 1);
  return std::sqrt(s);
}

namespace {
void check_wire(DType wire) {
  VT_CHECK_MSG(wire == DType::kF32 || wire == DType::kBF16,
               "the gradient sum's wire is f32 or bf16, got " << dtype_name(wire));
}
}  // namespace

void DistributedOptimizer::layer_grads_done(int layer, DType wire) {
  VT_CHECK_MSG(zero_stage_ == 2, "layer_grads_done is ZeRO-2's; this optimizer runs stage "
                                     << zero_stage_);
  check_wire(wire);
  for (int i = 0; i < store_->size(); ++i)
    if (store_->info(i).layer == layer) final_[i] = 1;
  start_final_reduces(wire);
}

void DistributedOptimizer::head_grads_done(DType wire) {
  VT_CHECK_MSG(zero_stage_ == 2, "head_grads_done is ZeRO-2's; this optimizer runs stage "
                                     << zero_stage_);
  check_wire(wire);
  for (int i = 0; i < store_->size(); ++i) {
    const ParamInfo& info = store_->info(i);
    if (info.group == ParamGroup::kLmHead && !info.pp_replicated) final_[i] = 1;
  }
  start_final_reduces(wire);
}

void DistributedOptimizer::start_final_reduces(DType wire) {
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  const bool bf16 = wire == DType::kBF16;
  if (D == 1 && !bf16) return;
  // AdamW: a bucket whose parameters are all final is packed by owner (the gather's layout)
  // and its reduce-scatter started; the owned sums are written back after the wait.
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    if (bucket_started_[bi]) continue;
    bool ready = true;
    for (int k = b.begin; k < b.end && ready; ++k) ready = final_[adam_[k].param] != 0;
    if (!ready) continue;
    bucket_started_[bi] = 1;
    const Device dev = b.host ? Device::kCPU : store_->device();
    const Tensor send = Tensor::zeros({b.size * D}, DType::kF32, dev);
    const Tensor recv = Tensor::zeros({b.size}, DType::kF32, dev);
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const Tensor g = store_->grad(a.param);
      const int64_t n = g.numel();
      if (n == 0) continue;
      const Tensor flat = g.flat(0, n);
      const int64_t full = std::min<int64_t>(D, n / a.chunk);  // ranks with a whole chunk
      ops::copy_2d(send, a.pack, b.size, flat, 0, a.chunk, full, a.chunk);
      const int64_t rest = n - full * a.chunk;
      if (rest > 0)
        ops::copy_2d(send, full * b.size + a.pack, rest, flat, full * a.chunk, rest, 1, rest);
    }
    if (bf16)
      dp->reduce_scatter_sum_bf16_start(send, recv);
    else
      dp->reduce_scatter_sum_start(send, recv);
    reduce_send_[bi] = send;
    reduce_recv_[bi] = recv;
  }
  // Muon: each final matrix's shard reduced to the DP rank of its owner's replica (the same
  // rank of every TP group: owner / tp), in place.
  const int tp = grid_.shape().tp;
  for (size_t k = 0; k < matrices_.size(); ++k) {
    const MatrixPlan& m = matrices_[k];
    if (matrix_started_[k] || !final_[m.param]) continue;
    matrix_started_[k] = 1;
    const Tensor g = store_->grad(m.param);
    if (g.numel() == 0) continue;
    const Tensor flat = g.flat(0, g.numel());
    if (bf16)
      dp->reduce_sum_bf16_start(flat, m.owner / tp);
    else
      dp->reduce_sum_start(flat, m.owner / tp);
  }
}

void DistributedOptimizer::whole_grads() {
  if (zero_stage_ != 2 || grid_.dp()->size() == 1) return;
  for (const AdamPlan& a : adam_) {
    const Tensor g = store_->grad(a.param);
    const int64_t n = g.numel();
    if (a.lo > 0) g.flat(0, a.lo).zero_();
    if (a.hi < n) g.flat(a.hi, n - a.hi).zero_();
  }
  for (const MatrixPlan& m : matrices_)
    if (!m.held) {
      const Tensor g = store_->grad(m.param);
      if (g.numel() > 0) g.flat(0, g.numel()).zero_();
    }
  all_reduce_grads(*store_, grid_.dp());
}

void DistributedOptimizer::reduce_grads(DType wire) {
  VT_CHECK_MSG(zero_stage_ == 2, "reduce_grads is ZeRO-2's gradient sum; this optimizer runs "
                                 "stage " << zero_stage_);
  check_wire(wire);
  std::fill(final_.begin(), final_.end(), 1);
  start_final_reduces(wire);
  grid_.dp()->all_reduce_wait();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    if (!reduce_recv_[bi].defined()) continue;
    const Bucket& b = buckets_[bi];
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      if (a.hi > a.lo)
        store_->grad(a.param).flat(a.lo, a.hi - a.lo).copy_from(
            reduce_recv_[bi].flat(a.pack, a.hi - a.lo));
    }
    reduce_send_[bi] = Tensor();
    reduce_recv_[bi] = Tensor();
  }
  std::fill(final_.begin(), final_.end(), 0);
  std::fill(bucket_started_.begin(), bucket_started_.end(), 0);
  std::fill(matrix_started_.begin(), matrix_started_.end(), 0);
}

template <class C>
void DistributedOptimizer::write_coefs(int64_t at, const C& c) {
  VT_CHECK(at >= kGuardFloats && at + int64_t(sizeof(C) / sizeof(float)) <= scalars_.numel());
  std::memcpy(scalars_.host_as<float>() + at, &c, sizeof c);
}

StepStats DistributedOptimizer::begin_step(int64_t step_index, int64_t total_steps) {
  // The last step's return (the forward normally finished it): its deferred Muon applies read
  // the scalars this step is about to rewrite.
  finish_param_gathers();
  StepStats s;
  s.step = step_index;
  s.lr_multiplier = lr_multiplier(config_.schedule, step_index, total_steps);
  s.momentum = muon_momentum(config_.schedule, step_index, total_steps);
  s.muon_weight_decay =
      muon_weight_decay(config_.muon.weight_decay, config_.muon.wd_style == MuonWdStyle::kNanochat,
                        step_index, total_steps);
  s.matrix_lr =
      (config_.adamw_matrices ? config_.adamw.matrix.lr : config_.muon.lr) * s.lr_multiplier;
  ++step_count_;
  // The kernels' floats, formed as the by-value launches form them (core/optim_math.h).
  for (size_t g = 0; g < adam_coefs_.size(); ++g) {
    if (adam_coefs_[g] < 0) continue;
    const AdamWHyper& h = config_.adamw.for_group(static_cast<ParamGroup>(g));
    write_coefs(adam_coefs_[g],
                adamw_coefs(adamw_step_args(h, h.lr * s.lr_multiplier, step_count_)));
  }
  write_coefs(momentum_coefs_, muon_momentum_coefs(s.momentum));
  const double lr = config_.muon.lr * s.lr_multiplier;
  const bool nanochat = config_.muon.wd_style == MuonWdStyle::kNanochat;
  for (const MatrixPlan& m : matrices_) {
    const double scale = muon_scale(m.rows, m.cols, config_.muon.aspect);
    write_coefs(m.coefs, muon_apply_coefs(lr, nanochat ? s.muon_weight_decay * scale
                                                        : s.muon_weight_decay,
                                          scale));
  }
  return s;
}

StepStats DistributedOptimizer::step(int64_t step_index, int64_t total_steps, double grad_norm) {
  StepStats s = begin_step(step_index, total_steps);
  s.grad_norm = grad_norm;
  s.clip_scale = clip_scale(s.grad_norm, config_.max_grad_norm);
  // The guard the host formed: every gradient read times the clip factor, the update applied
  // (the trainer does not step on a non-finite norm).
  float* guard = scalars_.host_as<float>();
  guard[kGuardGradScale] = static_cast<float>(s.clip_scale);
  guard[kGuardApply] = 1.0f;
  scalars_.upload();
  apply_updates();
  return s;
}

std::string DistributedOptimizer::device_step_unsupported() const {
  if (grid_.world()->size() != 1)
    return "the optimizer step on the device runs on one rank (this grid has " +
           std::to_string(grid_.world()->size()) + ")";
  if (store_->has_host_params()) return "parameters kept in host memory update on the host";
  return "";
}

void DistributedOptimizer::step_on_device(const Tensor& losses) {
  const std::string why = device_step_unsupported();
  VT_CHECK_MSG(why.empty(), "DistributedOptimizer::step_on_device: " << why);
  std::vector<Tensor> device_parts, host_parts;
  norm_parts(&device_parts, &host_parts);
  VT_CHECK(host_parts.empty());
  scalars_.upload();  // then the guard's floats are overwritten on the device
  ops::step_guard(device_parts, losses, config_.max_grad_norm, scalars_.device());
  apply_updates();
}

StepStats DistributedOptimizer::finish_step(StepStats s, bool* applied) {
  scalars_.download(0, kGuardFloats);
  scalars_.wait();
  const float* guard = scalars_.host_as<float>();
  // global_grad_norm's value: sqrt of the sum (plus the empty host part's 0).
  s.grad_norm = std::sqrt(ops::guard_sum_squares(guard) + 0.0);
  s.clip_scale = clip_scale(s.grad_norm, config_.max_grad_norm);
  if (applied) *applied = guard[kGuardApply] != 0.0f;
  return s;
}

std::vector<const void*> DistributedOptimizer::device_step_buffers() const {
  return {store_->params_tensor().raw(), store_->grads_tensor().raw(), momentum_.raw(),
          update_.raw(), exp_avg_.raw(), exp_avg_sq_.raw(), scalars_.device().raw()};
}

void DistributedOptimizer::apply_updates() {
  // Parameters kept in host memory: updated by the host beside the device's work when the store
  // is on a device (their states and gradients are host tensors: the CPU backend runs them,
  // with the scalars' host mirror).
  const bool side = store_->has_host_params() && store_->device() != Device::kCPU;
  std::thread host_update;
  if (side)
    host_update = std::thread([this] { adamw_update(true); });
  else
    adamw_update(true);
  adamw_update(false);
  std::vector<char> fresh_copy(static_cast<size_t>(store_->size()), 0);
  if (zero_stage_ == 2) {
    start_param_gathers();  // finished by finish_param_gathers, which also casts their copies
    if (gathers_pending_)
      for (size_t bi = 0; bi < buckets_.size(); ++bi)
        if (gather_recv_[bi].defined())
          for (int k = buckets_[bi].begin; k < buckets_[bi].end; ++k)
            fresh_copy[static_cast<size_t>(adam_[k].param)] = 1;
  } else {
    adamw_gather(false);
  }
  muon_step(fresh_copy);
  if (host_update.joinable()) host_update.join();
  adamw_gather(true);
  // Muon's applies wrote their matrices' bf16 compute copies (the same bits as the cast): the
  // rest (AdamW's, after their gather) are cast here.
  store_->refresh_compute_copy(fresh_copy);
}

void DistributedOptimizer::start_param_gathers() {
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  if (D == 1) return;
  const Device dev = store_->device();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    if (b.host || b.size == 0) continue;
    const DType dt = b.bf16 ? DType::kBF16 : DType::kF32;
    const Tensor send = Tensor::zeros({b.size}, dt, dev);
    const Tensor recv = Tensor::empty({b.size * D}, dt, dev);  // written whole by the gather
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const int64_t n = a.hi - a.lo;
      // bf16: the cast refresh_compute_copy makes (round to nearest even).
      if (n > 0) ops::copy(send.flat(a.pack, n), store_->param(a.param).flat(a.lo, n));
    }
    dp->all_gather_start(send, recv);
    gather_mark_[bi] = dp->started_mark();
    gather_send_[bi] = send;
    gather_recv_[bi] = recv;
    gathers_pending_ = true;
    if (b.bf16) masters_stale_ = true;
  }
}

void DistributedOptimizer::unpack_gather(size_t bi, const Tensor& recv, bool into_masters) {
  const Bucket& b = buckets_[bi];
  const int D = grid_.dp()->size();
  for (int k = b.begin; k < b.end; ++k) {
    const AdamPlan& a = adam_[k];
    const Tensor p = store_->param(a.param);
    const int64_t n = p.numel();
    if (n == 0) continue;
    const Tensor copy = store_->compute_copy_flat(a.param);
    const Tensor target = into_masters ? p.flat(0, n) : copy;
    const int64_t full = std::min<int64_t>(D, n / a.chunk);  // ranks with a whole chunk
    ops::copy_2d(target, 0, a.chunk, recv, a.pack, b.size, full, a.chunk);
    const int64_t rest = n - full * a.chunk;  // rank `full` holds the short last chunk
    if (rest > 0)
      ops::copy_2d(target, full * a.chunk, rest, recv, full * b.size + a.pack, rest, 1, rest);
    // An fp32 return lands in the masters: its compute copy is their cast, as refresh makes it.
    if (into_masters && !b.bf16 && copy.defined()) ops::copy(copy, p.flat(0, n));
  }
}

void DistributedOptimizer::finish_param_gathers(int layer) {
  if (!gathers_pending_) return;
  const bool all = layer >= kHeadLayer;
  bool left = false;
  // Muon's results of the matrices read at `layer` (and every one broadcast before them): the
  // wait, then the applies.
  int64_t muon_mark = -1;
  for (size_t k = 0; k < matrices_.size(); ++k)
    if (muon_pending_[k].result.defined() &&
        (all || store_->info(matrices_[k].param).layer <= layer))
      muon_mark = std::max(muon_mark, muon_pending_[k].mark);
  if (muon_mark >= 0) grid_.stage()->all_reduce_wait_until(muon_mark);
  for (size_t k = 0; k < matrices_.size(); ++k) {
    MuonPending& p = muon_pending_[k];
    if (!p.result.defined()) continue;
    if (p.mark > muon_mark) {
      left = true;
      continue;
    }
    muon_apply_result(matrices_[k], p.result, nullptr);
  }
  int64_t mark = -1;
  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    if (gather_recv_[bi].defined() && (buckets_[bi].need <= layer || all))
      mark = std::max(mark, gather_mark_[bi]);
  if (mark >= 0) grid_.dp()->all_reduce_wait_until(mark);
  // Done: every bucket started up to the mark (all of them where marks are 0: the default waits
  // for everything).
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    if (!gather_recv_[bi].defined()) continue;
    if (mark < 0 || gather_mark_[bi] > mark) {
      left = true;
      continue;
    }
    unpack_gather(bi, gather_recv_[bi], /*into_masters=*/!buckets_[bi].bf16);
    gather_send_[bi] = Tensor();
    gather_recv_[bi] = Tensor();
  }
  gathers_pending_ = left;
}

void DistributedOptimizer::sync_master_weights() {
  finish_param_gathers();
  if (!masters_stale_) return;
  masters_stale_ = false;
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  const Device dev = store_->device();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    if (!b.bf16 || b.size == 0) continue;
    const Tensor send = Tensor::zeros({b.size}, DType::kF32, dev);
    const Tensor recv = Tensor::empty({b.size * D}, DType::kF32, dev);
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const int64_t n = a.hi - a.lo;
      if (n > 0) send.flat(a.pack, n).copy_from(store_->param(a.param).flat(a.lo, n));
    }
    dp->all_gather(send, recv);
    unpack_gather(bi, recv, /*into_masters=*/true);
  }
}

bool DistributedOptimizer::returns_bf16(const std::string& name) const {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "returns_bf16: no parameter named " << name);
  return !config_.uses_muon(store_->info(i).group) && adam_plan(i, "returns_bf16").bf16;
}

void DistributedOptimizer::adamw_update(bool host) {
  // Host-kept parameters of a device store read the host mirror of the scalars.
  const Tensor scalars =
      host && store_->device() != Device::kCPU ? scalars_.host_view() : scalars_.device();
  for (const AdamPlan& a : adam_) {
    if (a.hi == a.lo || a.host != host) continue;
    const ParamInfo& info = store_->info(a.param);
    const int64_t n = a.hi - a.lo;
    const Tensor& m = state_tensor(a, "exp_avg");
    const Tensor& v = state_tensor(a, "exp_avg_sq");
    ops::adamw_update(store_->param(a.param).flat(a.lo, n), store_->grad(a.param).flat(a.lo, n),
                      m.flat(a.state, n), v.flat(a.state, n),
                      ops::StepValues{scalars, adam_coefs_[static_cast<size_t>(info.group)]});
  }
}

void DistributedOptimizer::adamw_gather(bool host) {
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  if (D == 1) return;
  // All-gather the updated chunks, one bucket of parameters at a time. Rank r's chunk of a
  // parameter sits at r * bucket size + pack in the gathered buffer: the full chunks go back
  // into the parameter with one strided copy, a shorter last one with a second.
  const Device dev = host ? Device::kCPU : store_->device();
  for (const Bucket& b : buckets_) {
    if (b.host != host) continue;
    const Tensor send = Tensor::zeros({b.size}, DType::kF32, dev);
    const Tensor recv = Tensor::zeros({b.size * D}, DType::kF32, dev);
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const int64_t n = a.hi - a.lo;
      if (n > 0) send.flat(a.pack, n).copy_from(store_->param(a.param).flat(a.lo, n));
    }
    dp->all_gather(send, recv);
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const Tensor p = store_->param(a.param);
      const int64_t n = p.numel();
      if (n == 0) continue;
      const Tensor flat = p.flat(0, n);
      const int64_t full = std::min<int64_t>(D, n / a.chunk);  // ranks with a whole chunk
      ops::copy_2d(flat, 0, a.chunk, recv, a.pack, b.size, full, a.chunk);
      const int64_t rest = n - full * a.chunk;  // rank `full` holds the short last chunk
      if (rest > 0)
        ops::copy_2d(flat, full * a.chunk, rest, recv, full * b.size + a.pack, rest, 1, rest);
    }
  }
}

const Tensor& DistributedOptimizer::state_tensor(const AdamPlan& a, const std::string& kind) const {
  if (kind == "exp_avg") return a.host ? exp_avg_host_ : exp_avg_;
  return a.host ? exp_avg_sq_host_ : exp_avg_sq_;
}

void DistributedOptimizer::plan_muon_rounds() {
  const int S = grid_.stage()->size();
  const size_t M = matrices_.size();
  muon_round_begin_.clear();
  std::vector<int64_t> share(static_cast<size_t>(S), 0);
  for (size_t k = 0; k < M; ++k) {
    const MatrixPlan& m = matrices_[k];
    int64_t& mine = share[static_cast<size_t>(m.owner)];
    if (muon_round_begin_.empty() || (mine > 0 && mine + m.rows * m.cols > kNsBatchElements)) {
      muon_round_begin_.push_back(k);
      std::fill(share.begin(), share.end(), 0);
    }
    mine += m.rows * m.cols;
  }
  // update_: the held matrices round by round, owner by owner, in muon_order.
  int64_t update = 0;
  for (size_t r = 0; r < muon_round_begin_.size(); ++r) {
    const size_t lo = muon_round_begin_[r];
    const size_t hi = r + 1 < muon_round_begin_.size() ? muon_round_begin_[r + 1] : M;
    for (int owner = 0; owner < S; ++owner) {
      for (size_t k : muon_order(lo, hi, owner)) {
        MatrixPlan& m = matrices_[k];
        if (!m.held) continue;
        m.update = update;
        update += store_->info(m.param).numel();
      }
    }
  }
}

std::vector<size_t> DistributedOptimizer::muon_order(size_t lo, size_t hi, int owner) const {
  std::vector<std::pair<int64_t, int64_t>> shapes;  // in the order of their first matrix
  std::vector<size_t> order;
  for (size_t k = lo; k < hi; ++k) {
    const MatrixPlan& m = matrices_[k];
    if (m.owner != owner) continue;
    if (std::find(shapes.begin(), shapes.end(), std::pair{m.rows, m.cols}) == shapes.end())
      shapes.push_back({m.rows, m.cols});
  }
  for (const auto& shape : shapes)
    for (size_t k = lo; k < hi; ++k)
      if (matrices_[k].owner == owner && std::pair{matrices_[k].rows, matrices_[k].cols} == shape)
        order.push_back(k);
  return order;
}

void DistributedOptimizer::muon_step(std::vector<char>& fresh_copy) {
  const Tensor scalars = scalars_.device();
  const Tensor params = store_->params_tensor(), grads = store_->grads_tensor();
  const Device dev = store_->device();
  Communicator* tp = grid_.tp();
  Communicator* stage = grid_.stage();
  const int T = tp->size();
  const int me = stage->rank();
  const size_t M = matrices_.size();
  auto zeros = [dev](int64_t n) { return Tensor::zeros({n}, DType::kF32, dev); };

  // 1. Momentum on the local shards of the matrices this DP replica holds (those whose owner is
  // in its TP group): update_ = Nesterov direction of each shard.
  for (const MatrixPlan& m : matrices_) {
    if (!m.held) continue;
    const ParamInfo& info = store_->info(m.param);
    const int64_t n = info.numel();
    ops::muon_momentum(grads.flat(info.offset, n), momentum_.flat(m.state, n),
                       update_.flat(m.update, n), ops::StepValues{scalars, momentum_coefs_});
  }

  // 2. The owner's TP group assembles each whole matrix; only the owner keeps it.
  std::vector<Tensor> whole(M);
  for (size_t k = 0; k < M; ++k) {
    const MatrixPlan& m = matrices_[k];
    if (!m.held) continue;  // another DP replica's TP group gathers this one
    const ParamInfo& info = store_->info(m.param);
    const int64_t n = info.numel();
    const Tensor local = update_.flat(m.update, n);
    const bool keep = m.owner == me;
    if (info.split.axis < 0 || T == 1) {
      if (keep) whole[k] = local;  // newton_schulz reads it, writes elsewhere
      continue;
    }
    const Tensor gathered = zeros(n * T);
    tp->all_gather(local, gathered);
    if (!keep) continue;
    if (info.split.axis == 0) {
      whole[k] = gathered;  // rank r's rows follow rank r-1's
    } else {
      // Rank r's (rows x lc) block becomes columns [r * lc, (r + 1) * lc).
      whole[k] = zeros(m.rows * m.cols);
      const int64_t lc = info.shape[1];
      for (int r = 0; r < T; ++r)
        ops::copy_2d(whole[k], r * lc, m.cols, gathered, r * n, lc, m.rows, lc);
    }
  }

  // 3-4. Owners orthogonalize their whole matrices and broadcast the results over the stage,
  // round by round: a round is consecutive matrices, as many as keep every owner's share within kNsBatchElements elements (one matrix at least), and each owner runs its share
  // of a round as one newton_schulz_batched call (batched by shape). Round r's broadcasts are
  // started (on the communicator's own stream where it has one), round r + 1's Newton-Schulz
  // runs meanwhile, then the wait, and every rank applies its own slice of round r. With bf16
  // Newton-Schulz the results are bf16 values (the batch rounds its last iterate), so they travel
  // as bf16: the same bits in half the bytes. The rounds depend only on matrices_, the same on
  // every rank of the stage.
  const int S = stage->size();
  const bool bf16_wire = config_.muon.ns_dtype == DType::kBF16 && S > 1;  // alone: no wire
  const DType wire = bf16_wire ? DType::kBF16 : DType::kF32;
  std::vector<Tensor> ortho(M), sent(M);
  const size_t rounds = muon_round_begin_.size();
  auto round_range = [&](size_t r) {
    return std::pair<size_t, size_t>{muon_round_begin_[r],
                                     r + 1 < rounds ? muon_round_begin_[r + 1] : M};
  };
  // This owner's share of a round as one newton_schulz_batched call; the results in one buffer,
  // in the list's order (each batch's outputs one after another).
  auto orthogonalize = [&](size_t lo, size_t hi) {
    const std::vector<size_t> mine = muon_order(lo, hi, me);
    if (mine.empty()) return;
    int64_t total = 0;
    for (size_t k : mine) total += matrices_[k].rows * matrices_[k].cols;
    const Tensor results = Tensor::empty({total}, DType::kF32, dev);  // written whole
    std::vector<NsMatrix> batch;
    int64_t at = 0;
    for (size_t k : mine) {
      const MatrixPlan& m = matrices_[k];
      ortho[k] = results.flat(at, m.rows * m.cols);
      at += m.rows * m.cols;
      batch.push_back({whole[k], static_cast<int>(m.rows), static_cast<int>(m.cols), ortho[k]});
    }
    newton_schulz_batched(batch, config_.muon.ns_steps, coeffs_, config_.muon.ns_dtype);
    for (size_t k : mine) whole[k] = Tensor();
  };
  auto start_broadcast = [&](size_t k) {
    const MatrixPlan& m = matrices_[k];
    if (m.owner == me && !bf16_wire) {
      sent[k] = ortho[k];
    } else {
      sent[k] = Tensor::zeros({m.rows * m.cols}, wire, dev);
      if (m.owner == me) ops::copy(sent[k], ortho[k]);  // exact: the values are bf16
    }
    ortho[k] = Tensor();
    stage->broadcast_start(sent[k], m.owner);
  };
  auto apply = [&](size_t k) { muon_apply_result(matrices_[k], sent[k], &fresh_copy); };
  // Stage 2 leaves the broadcasts in flight: each matrix's result is applied when the next
  // forward first needs its layer (finish_param_gathers), with this step's lr and decay (the device
  // scalars, rewritten only by the next begin_step, which finishes every apply first).
  const bool defer = zero_stage_ == 2 && S > 1;
  if (rounds > 0) orthogonalize(round_range(0).first, round_range(0).second);
  for (size_t r = 0; r < rounds; ++r) {
    const auto [lo, hi] = round_range(r);
    for (size_t k = lo; k < hi; ++k) {
      start_broadcast(k);
      if (defer) {
        muon_pending_[k] = {sent[k], stage->started_mark()};
        sent[k] = Tensor();
        fresh_copy[static_cast<size_t>(matrices_[k].param)] = 1;  // written by the apply
        gathers_pending_ = true;
      }
    }
    if (r + 1 < rounds) {
      const auto [nlo, nhi] = round_range(r + 1);
      orthogonalize(nlo, nhi);
    }
    if (defer) continue;
    stage->all_reduce_wait();
    for (size_t k = lo; k < hi; ++k) apply(k);
  }
}

void DistributedOptimizer::muon_apply_result(const MatrixPlan& m, Tensor& x,
                                             std::vector<char>* fresh_copy) {
  const ParamInfo& info = store_->info(m.param);
  const Tensor params = store_->params_tensor();
  const Device dev = store_->device();
  const Tensor result = x;  // f32, or bf16 (muon_apply reads either)
  x = Tensor();
  const int64_t n = info.numel();
  Tensor mine = result;
  if (info.split.axis == 0) {
    mine = result.flat(info.split.offset * m.cols, n);
  } else if (info.split.axis == 1 && info.shape[1] != m.cols) {
    const int64_t lc = info.shape[1];
    mine = Tensor::zeros({n}, result.dtype(), dev);
    ops::copy_2d(mine, 0, lc, result, info.split.offset, m.cols, m.rows, lc);
  }
  // The step's lr and decay from the device scalars (begin_step); a deferred apply (--zero 2)
  // runs before the next begin_step rewrites them.
  const bool nanochat = config_.muon.wd_style == MuonWdStyle::kNanochat;  // cautious decay
  const Tensor copy = store_->compute_copy_flat(m.param);
  ops::muon_apply(params.flat(info.offset, n), mine, ops::StepValues{scalars_.device(), m.coefs},
                  nanochat, copy);
  if (copy.defined() && fresh_copy != nullptr) (*fresh_copy)[static_cast<size_t>(m.param)] = 1;
}

const std::vector<std::string>& DistributedOptimizer::state_kinds(const std::string& name) const {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "DistributedOptimizer::state_kinds: no parameter named " << name);
  return config_.uses_muon(store_->info(i).group) ? muon_state_kinds() : adamw_state_kinds();
}

const DistributedOptimizer::AdamPlan& DistributedOptimizer::adam_plan(
    int param, const std::string& who) const {
  VT_CHECK_MSG(!config_.uses_muon(store_->info(param).group),
               who << ": " << store_->info(param).name << " is a Muon parameter");
  return adam_[plan_of_[param]];
}

const DistributedOptimizer::MatrixPlan& DistributedOptimizer::matrix_plan(
    int param, const std::string& who) const {
  VT_CHECK_MSG(config_.uses_muon(store_->info(param).group),
               who << ": " << store_->info(param).name << " is an AdamW parameter");
  return matrices_[plan_of_[param]];
}

int DistributedOptimizer::muon_owner(const std::string& name) const {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "muon_owner: no parameter named " << name);
  return matrix_plan(i, "muon_owner").owner;
}

namespace {
void check_kind(const std::vector<std::string>& kinds, const std::string& name,
                const std::string& kind) {
  VT_CHECK_MSG(std::find(kinds.begin(), kinds.end(), kind) != kinds.end(),
               "parameter " << name << " has no optimizer state '" << kind << "'");
}
}  // namespace

Tensor DistributedOptimizer::gather_state(const std::string& name, const std::string& kind) {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "gather_state: no parameter named " << name);
  const ParamInfo& info = store_->info(i);
  // Host; gather_state_into writes every element.
  Tensor out = info.numel() == 0 ? Tensor::zeros(info.shape) : Tensor::empty(info.shape);
  gather_state_into(name, kind, out);
  return out;
}

void DistributedOptimizer::gather_state_into(const std::string& name, const std::string& kind,
                                             const Tensor& out) {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "gather_state: no parameter named " << name);
  check_kind(state_kinds(name), name, kind);
  const ParamInfo& info = store_->info(i);
  VT_CHECK_MSG(out.on_host() && out.dtype() == DType::kF32 && out.shape() == info.shape,
               "gather_state " << name << "/" << kind << ": wants a host f32 tensor of shape "
                               << shape_str(info.shape));
  const int64_t n = info.numel();
  if (n == 0) return;
  if (config_.uses_muon(info.group)) {
    // The owner's DP replica holds it; every replica gets it (collective over DP).
    const MatrixPlan& m = matrix_plan(i, "gather_state");
    if (grid_.dp()->size() == 1) {
      out.flat(0, n).copy_from(momentum_.flat(m.state, n));
      return;
    }
    const Tensor buf = Tensor::zeros({n}, DType::kF32, store_->device());
    if (m.held) buf.copy_from(momentum_.flat(m.state, n));
    grid_.dp()->broadcast(buf, m.owner / grid_.shape().tp);
    out.flat(0, n).copy_from(buf);
    return;
  }
  const AdamPlan& a = adam_plan(i, "gather_state");
  const Tensor& st = state_tensor(a, kind);
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  if (D == 1) {  // this rank holds the whole state
    out.flat(0, n).copy_from(st.flat(a.state, n));
    return;
  }
  const Device dev = a.host ? Device::kCPU : store_->device();
  const Tensor send = Tensor::zeros({a.chunk}, DType::kF32, dev);
  const Tensor recv = Tensor::zeros({a.chunk * D}, DType::kF32, dev);
  if (a.hi > a.lo) send.flat(0, a.hi - a.lo).copy_from(st.flat(a.state, a.hi - a.lo));
  dp->all_gather(send, recv);
  out.flat(0, n).copy_from(recv.flat(0, n));  // chunk r sits at r * chunk
}

void DistributedOptimizer::scatter_state(const std::string& name, const std::string& kind,
                                         const Tensor& local_full) {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "scatter_state: no parameter named " << name);
  check_kind(state_kinds(name), name, kind);
  const ParamInfo& info = store_->info(i);
  VT_CHECK_MSG(local_full.shape() == info.shape,
               "scatter_state " << name << "/" << kind << ": shape "
                                << shape_str(local_full.shape()) << ", local parameter has "
                                << shape_str(info.shape));
  VT_CHECK_MSG(local_full.dtype() == DType::kF32,
               "scatter_state " << name << "/" << kind << ": expects an f32 tensor, got "
                                << dtype_name(local_full.dtype()));
  VT_CHECK_MSG(local_full.on_host() || local_full.device() == store_->device(),
               "scatter_state " << name << "/" << kind
                                << ": the tensor must be on the host or the store's device");
  if (config_.uses_muon(info.group)) {
    const MatrixPlan& m = matrix_plan(i, "scatter_state");
    const int64_t n = info.numel();
    if (n > 0 && m.held) momentum_.flat(m.state, n).copy_from(local_full.flat(0, n));
    return;
  }
  const AdamPlan& a = adam_plan(i, "scatter_state");
  const Tensor& st = state_tensor(a, kind);
  if (a.hi > a.lo) st.flat(a.state, a.hi - a.lo).copy_from(local_full.flat(a.lo, a.hi - a.lo));
}

}  // namespace vt::optim
