// DistributedOptimizer: layout plans (Muon owners, ZeRO-1 chunks), the distributed Muon and
// ZeRO-1 AdamW steps, and checkpoint gather/scatter of the sharded states.
#include "optim/distributed_optimizer.h"

#include <algorithm>

#include "core/check.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/grad_sync.h"
#include "optim/schedule.h"

namespace vt::optim {

namespace {
// Per-rank floats of one ZeRO-1 all-gather bucket (the gathered buffer is dp times this).
constexpr int64_t kGatherBucket = int64_t{4} << 20;
}  // namespace

DistributedOptimizer::DistributedOptimizer(ParamStore* store, OptimizerConfig config,
                                           const ProcessGrid& grid)
    : store_(store), config_(config), grid_(grid), coeffs_(NsCoefficients::of(config.muon.ns)) {
  VT_CHECK(store_ != nullptr);
  VT_CHECK_MSG(store_->finalized(), "DistributedOptimizer needs a finalized ParamStore");
  VT_CHECK_MSG(config_.muon.ns_steps >= 1, "Muon ns_steps must be >= 1");
  const int tp = grid_.shape().tp, dp = grid_.shape().dp;
  const int tp_rank = grid_.coords().tp, dp_rank = grid_.coords().dp;
  const int stage_size = grid_.stage()->size();
  VT_CHECK(grid_.tp()->size() == tp && grid_.dp()->size() == dp && stage_size == tp * dp);

  plan_of_.assign(store_->size(), -1);
  int64_t momentum_size = 0, adam_size = 0;
  double matrix_numel = 0;
  for (int i = 0; i < store_->size(); ++i) {
    const ParamInfo& info = store_->info(i);
    if (Muon::handles(info.group)) {
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
      m.owner = static_cast<int>(matrices_.size() % stage_size);
      m.rows = info.global_shape[0];
      m.cols = info.global_shape[1];
      m.state = momentum_size;
      momentum_size += info.numel();
      matrix_numel += static_cast<double>(m.rows * m.cols);
      plan_of_[i] = static_cast<int>(matrices_.size());
      matrices_.push_back(m);
    } else {
      AdamPlan a;
      a.param = i;
      const int64_t n = info.numel();
      a.chunk = (n + dp - 1) / dp;
      a.lo = std::min(n, a.chunk * dp_rank);
      a.hi = std::min(n, a.lo + a.chunk);
      a.state = adam_size;
      adam_size += a.hi - a.lo;
      if (buckets_.empty() || (buckets_.back().size > 0 &&
                               buckets_.back().size + a.chunk > kGatherBucket)) {
        Bucket b;
        b.begin = b.end = static_cast<int>(adam_.size());
        buckets_.push_back(b);
      }
      a.pack = buckets_.back().size;
      buckets_.back().size += a.chunk;
      buckets_.back().end = static_cast<int>(adam_.size()) + 1;
      plan_of_[i] = static_cast<int>(adam_.size());
      adam_.push_back(a);
    }
  }
  momentum_.assign(momentum_size, 0.0f);
  exp_avg_.assign(adam_size, 0.0f);
  exp_avg_sq_.assign(adam_size, 0.0f);

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
}

void DistributedOptimizer::set_step_count(int64_t t) {
  VT_CHECK_MSG(t >= 0, "step count must be >= 0, got " << t);
  step_count_ = t;
}

StepStats DistributedOptimizer::step(int64_t step_index, int64_t total_steps) {
  StepStats s;
  s.step = step_index;
  s.lr_multiplier = lr_multiplier(config_.schedule, step_index, total_steps);
  s.momentum = muon_momentum(config_.schedule, step_index);
  s.matrix_lr = config_.muon.lr * s.lr_multiplier;
  s.grad_norm = global_grad_norm(*store_, grid_, norm_mask_);
  s.clip_scale = clip_scale(s.grad_norm, config_.max_grad_norm);
  scale_grads(*store_, s.clip_scale);
  ++step_count_;
  adamw_step(s.lr_multiplier);
  muon_step(s.lr_multiplier, s.momentum);
  return s;
}

void DistributedOptimizer::adamw_step(double lr_multiplier) {
  float* params = store_->param_data();
  const float* grads = store_->grad_data();
  for (const AdamPlan& a : adam_) {
    if (a.hi == a.lo) continue;
    const ParamInfo& info = store_->info(a.param);
    const AdamWHyper& h = config_.adamw.for_group(info.group);
    const int64_t o = info.offset + a.lo;
    adamw_update(params + o, grads + o, exp_avg_.data() + a.state, exp_avg_sq_.data() + a.state,
                 a.hi - a.lo, h, h.lr * lr_multiplier, step_count_);
  }
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  if (D == 1) return;
  // All-gather the updated chunks, one bucket of parameters at a time.
  std::vector<float> send, recv;
  for (const Bucket& b : buckets_) {
    send.assign(b.size, 0.0f);
    recv.resize(b.size * D);
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const float* p = params + store_->info(a.param).offset;
      std::copy(p + a.lo, p + a.hi, send.data() + a.pack);
    }
    dp->all_gather(send.data(), recv.data(), b.size);
    for (int k = b.begin; k < b.end; ++k) {
      const AdamPlan& a = adam_[k];
      const ParamInfo& info = store_->info(a.param);
      float* p = params + info.offset;
      const int64_t n = info.numel();
      for (int r = 0; r < D; ++r) {
        const int64_t lo = std::min(n, a.chunk * r), hi = std::min(n, lo + a.chunk);
        const float* src = recv.data() + r * b.size + a.pack;
        std::copy(src, src + (hi - lo), p + lo);
      }
    }
  }
}

void DistributedOptimizer::muon_step(double lr_multiplier, double momentum) {
  const double lr = config_.muon.lr * lr_multiplier;
  float* params = store_->param_data();
  const float* grads = store_->grad_data();
  Communicator* tp = grid_.tp();
  Communicator* stage = grid_.stage();
  const int T = tp->size();
  const int me = stage->rank();
  const int my_dp = grid_.coords().dp;
  const size_t M = matrices_.size();

  // 1. Momentum on the local shards: u = Nesterov direction of each shard.
  std::vector<float> u(momentum_.size());
  for (const MatrixPlan& m : matrices_) {
    const ParamInfo& info = store_->info(m.param);
    muon_momentum(grads + info.offset, momentum_.data() + m.state, u.data() + m.state,
                  info.numel(), momentum);
  }

  // 2. The owner's TP group assembles each whole matrix; only the owner keeps it.
  std::vector<std::vector<float>> whole(M);
  std::vector<float> gathered;
  for (size_t k = 0; k < M; ++k) {
    const MatrixPlan& m = matrices_[k];
    if (m.owner / T != my_dp) continue;  // another DP replica's TP group gathers this one
    const ParamInfo& info = store_->info(m.param);
    const int64_t n = info.numel();
    const float* local = u.data() + m.state;
    const bool keep = m.owner == me;
    if (info.split.axis < 0 || T == 1) {
      if (keep) whole[k].assign(local, local + n);
      continue;
    }
    gathered.resize(n * T);
    tp->all_gather(local, gathered.data(), n);
    if (!keep) continue;
    if (info.split.axis == 0) {
      whole[k] = gathered;  // rank r's rows follow rank r-1's
    } else {
      whole[k].resize(m.rows * m.cols);
      const int64_t lc = info.shape[1];
      for (int r = 0; r < T; ++r)
        for (int64_t i = 0; i < m.rows; ++i)
          std::copy(gathered.data() + r * n + i * lc, gathered.data() + r * n + (i + 1) * lc,
                    whole[k].data() + i * m.cols + r * lc);
    }
  }

  // 3. Owners orthogonalize their whole matrices (in parallel across the stage's ranks).
  std::vector<std::vector<float>> ortho(M);
  for (size_t k = 0; k < M; ++k) {
    if (matrices_[k].owner != me) continue;
    const MatrixPlan& m = matrices_[k];
    ortho[k].resize(m.rows * m.cols);
    newton_schulz(whole[k].data(), static_cast<int>(m.rows), static_cast<int>(m.cols),
                  ortho[k].data(), config_.muon.ns_steps, coeffs_);
    std::vector<float>().swap(whole[k]);
  }

  // 4. Broadcast in matrix order over the stage; each rank applies its own slice.
  std::vector<float> x, slice;
  for (size_t k = 0; k < M; ++k) {
    const MatrixPlan& m = matrices_[k];
    const ParamInfo& info = store_->info(m.param);
    if (m.owner == me) {
      x.swap(ortho[k]);
    } else {
      x.resize(m.rows * m.cols);
    }
    stage->broadcast(x.data(), m.rows * m.cols, m.owner);
    const float* mine = x.data();
    const int64_t n = info.numel();
    if (info.split.axis == 0) {
      mine = x.data() + info.split.offset * m.cols;
    } else if (info.split.axis == 1 && info.shape[1] != m.cols) {
      slice.resize(n);
      const int64_t lc = info.shape[1];
      for (int64_t i = 0; i < m.rows; ++i)
        std::copy(x.data() + i * m.cols + info.split.offset,
                  x.data() + i * m.cols + info.split.offset + lc, slice.data() + i * lc);
      mine = slice.data();
    }
    const double scale = muon_scale(m.rows, m.cols, config_.muon.aspect);
    muon_apply(params + info.offset, mine, n, lr, config_.muon.weight_decay, scale);
    std::vector<float>().swap(ortho[k]);
  }
}

const std::vector<std::string>& DistributedOptimizer::state_kinds(const std::string& name) const {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "DistributedOptimizer::state_kinds: no parameter named " << name);
  return Muon::handles(store_->info(i).group) ? Muon::state_kinds() : AdamW::state_kinds();
}

const DistributedOptimizer::AdamPlan& DistributedOptimizer::adam_plan(
    int param, const std::string& who) const {
  VT_CHECK_MSG(!Muon::handles(store_->info(param).group),
               who << ": " << store_->info(param).name << " is a Muon parameter");
  return adam_[plan_of_[param]];
}

const DistributedOptimizer::MatrixPlan& DistributedOptimizer::matrix_plan(
    int param, const std::string& who) const {
  VT_CHECK_MSG(Muon::handles(store_->info(param).group),
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
  check_kind(state_kinds(name), name, kind);
  const ParamInfo& info = store_->info(i);
  Tensor out = Tensor::zeros(info.shape);
  const int64_t n = info.numel();
  if (Muon::handles(info.group)) {
    const MatrixPlan& m = matrix_plan(i, "gather_state");
    std::copy(momentum_.data() + m.state, momentum_.data() + m.state + n, out.f32());
    return out;
  }
  const AdamPlan& a = adam_plan(i, "gather_state");
  const std::vector<float>& st = kind == "exp_avg" ? exp_avg_ : exp_avg_sq_;
  Communicator* dp = grid_.dp();
  const int D = dp->size();
  std::vector<float> send(a.chunk, 0.0f), recv(a.chunk * D);
  std::copy(st.data() + a.state, st.data() + a.state + (a.hi - a.lo), send.data());
  dp->all_gather(send.data(), recv.data(), a.chunk);
  std::copy(recv.data(), recv.data() + n, out.f32());  // chunk r sits at r * chunk
  return out;
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
  const float* src = local_full.f32();
  if (Muon::handles(info.group)) {
    const MatrixPlan& m = matrix_plan(i, "scatter_state");
    std::copy(src, src + info.numel(), momentum_.data() + m.state);
    return;
  }
  const AdamPlan& a = adam_plan(i, "scatter_state");
  std::vector<float>& st = kind == "exp_avg" ? exp_avg_ : exp_avg_sq_;
  std::copy(src + a.lo, src + a.hi, st.data() + a.state);
}

}  // namespace vt::optim
