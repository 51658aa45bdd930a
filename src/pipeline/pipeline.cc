// 1F1B pipeline schedule and bundle exchange (see pipeline.h).
#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "model/value_path.h"

namespace vt {

namespace {
constexpr int kTagControl = 13;  // "micro-batch i goes ahead" (1) or "the step ends here" (0)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<PipelineOp> interleaved_1f1b(int pp, int vpp, int M, int stage) {
  VT_CHECK(pp >= 1 && vpp >= 1 && M >= 1 && 0 <= stage && stage < pp);
  VT_CHECK_MSG(vpp == 1 || M % pp == 0, "the interleaved schedule needs a multiple of pp ("
                                            << pp << ") micro-batches, got " << M);
  const int total = M * vpp, group = pp * vpp;
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % group) / pp;
    return forward ? c : vpp - 1 - c;
  };
  auto micro_of = [&](int k) { return vpp == 1 ? k : (k / group) * pp + k % pp; };
  int warmup = vpp == 1 ? std::min(pp - stage - 1, M)
                        : (M == pp ? total : std::min(total, (pp - stage - 1) * 2 + (vpp - 1) * pp));
  std::vector<PipelineOp> ops;
  ops.reserve(2 * total);
  int f = 0, b = 0;
  auto fwd = [&] { ops.push_back({true, chunk_of(f, true), micro_of(f)}); ++f; };
  auto bwd = [&] { ops.push_back({false, chunk_of(b, false), micro_of(b)}); ++b; };
  for (int i = 0; i < warmup; ++i) fwd();
  while (f < total) {
    fwd();
    bwd();
  }
  while (b < total) bwd();
  return ops;
}

double replay_step_seconds(int pp, int vpp, int M, const std::vector<std::vector<double>>& pass_s) {
  VT_CHECK(static_cast<int>(pass_s.size()) == pp);
  std::vector<std::vector<PipelineOp>> ops(pp);
  for (int r = 0; r < pp; ++r) {
    ops[r] = interleaved_1f1b(pp, vpp, M, r);
    VT_CHECK(pass_s[r].size() == ops[r].size());
  }
  // finish[(forward, virtual stage, micro)] in seconds; -1: not run yet.
  const int nv = pp * vpp, last = nv - 1;
  std::vector<double> finish(2 * static_cast<size_t>(nv) * M, -1.0);
  auto at = [&](bool fwd, int v, int i) -> double& { return finish[(static_cast<size_t>(fwd) * nv + v) * M + i]; };
  std::vector<double> clock(pp, 0.0);
  std::vector<size_t> pos(pp, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r)
      while (pos[r] < ops[r].size()) {
        const PipelineOp& o = ops[r][pos[r]];
        const int v = o.chunk * pp + r;
        double ready = 0.0;
        if (o.forward ? v > 0 : true) {
          ready = o.forward ? at(true, v - 1, o.micro) : (v == last ? at(true, v, o.micro) : at(false, v + 1, o.micro));
          if (ready < 0) break;  // its input is not there yet
        }
        clock[r] = std::max(clock[r], ready) + pass_s[r][pos[r]];
        at(o.forward, v, o.micro) = clock[r];
        ++pos[r];
        moved = true;
      }
  }
  for (int r = 0; r < pp; ++r) VT_CHECK_MSG(pos[r] == ops[r].size(), "the schedule does not run to its end");
  return *std::max_element(clock.begin(), clock.end());
}

PipelineEngine::PipelineEngine(GPT& model, const ProcessGrid& grid) : model_(model), grid_(grid) {}

int PipelineEngine::prev_rank(int chunk) const {
  const int s = grid_.coords().pp;
  if (model_.chunk_begin(chunk) == 0) return -1;
  return s > 0 ? s - 1 : grid_.shape().pp - 1;  // the first rank's chunk c > 0: the last rank's c - 1
}

int PipelineEngine::next_rank(int chunk) const {
  const int s = grid_.coords().pp, P = grid_.shape().pp;
  if (model_.chunk_end(chunk) == model_.config().n_layer) return -1;
  return s + 1 < P ? s + 1 : 0;  // the last rank's chunk c: the first rank's c + 1
}

std::vector<PipelineEngine::Slot> PipelineEngine::boundary_slots(int boundary) const {
  const ModelConfig& cfg = model_.config();
  std::vector<Slot> slots = {{Slot::kX, -1}};
  if (cfg.value().reads_x0()) slots.push_back({Slot::kX0, -1});
  const bool later_targets = !cfg.target_layers.empty() && cfg.target_layers.back() >= boundary;
  for (int j = 0; j < boundary && later_targets; ++j)
    if (model_.keeps_value(j)) slots.push_back({Slot::kValue, j});
  for (int j = 0; j <= boundary && cfg.dense; ++j)
    if (model_.keeps_dense(j, boundary)) slots.push_back({Slot::kDense, j});
  return slots;
}

int64_t PipelineEngine::slot_numel(const Slot& s, int B) const {
  const ModelConfig& cfg = model_.config();
  const int64_t N = static_cast<int64_t>(B) * cfg.seq_len;
  if (s.kind == Slot::kValue)
    return N * (cfg.n_kv_head / model_.parallel().tp_size()) * cfg.head_dim;
  return N * cfg.n_embd;
}

void PipelineEngine::send_bundle(const Bundle& b, int boundary, int B, int peer, bool forward) {
  // One message per boundary: the slots packed back to back, in the activation dtype, on the
  // model's device (a communicator for device tensors sends it from there).
  const std::vector<Slot> slots = boundary_slots(boundary);
  int64_t total = 0;
  for (const Slot& s : slots) total += slot_numel(s, B);
  Tensor buf = Tensor::zeros({total}, model_.act_dtype(), model_.device());
  int64_t off = 0;
  for (const Slot& s : slots) {
    const int64_t n = slot_numel(s, B);
    const Tensor* t = s.kind == Slot::kX      ? &b.x
                      : s.kind == Slot::kX0   ? &b.x0
                      : s.kind == Slot::kDense ? &b.dense[s.layer]
                                               : &b.values[s.layer];
    if (t->defined()) {  // else zeros, e.g. no gradient reached a detached V1
      VT_CHECK(t->numel() == n);
      buf.flat(off, n).copy_from(t->flat(0, n));
    }
    off += n;
  }
  grid_.pp()->send_async(buf, peer, tag_of(boundary, forward));
}

Bundle PipelineEngine::recv_bundle(int boundary, int B, int peer, bool forward) {
  const ModelConfig& cfg = model_.config();
  const std::vector<Slot> slots = boundary_slots(boundary);
  int64_t total = 0;
  for (const Slot& s : slots) total += slot_numel(s, B);
  Tensor buf = Tensor::zeros({total}, model_.act_dtype(), model_.device());
  const double t0 = now_s();
  grid_.pp()->recv(buf, peer, tag_of(boundary, forward));
  rank_times_.wait_s += now_s() - t0;
  Bundle b;
  b.values.resize(cfg.n_layer);
  b.dense.resize(cfg.n_layer + 1);
  const int kvl = cfg.n_kv_head / model_.parallel().tp_size();
  int64_t off = 0;
  for (const Slot& s : slots) {
    const Shape shape = s.kind == Slot::kValue ? Shape{B, cfg.seq_len, kvl, cfg.head_dim}
                                               : Shape{B, cfg.seq_len, cfg.n_embd};
    Tensor t = Tensor::zeros(shape, model_.act_dtype(), model_.device());
    t.flat(0, t.numel()).copy_from(buf.flat(off, t.numel()));
    off += t.numel();
    if (s.kind == Slot::kX) b.x = t;
    else if (s.kind == Slot::kX0) b.x0 = t;
    else if (s.kind == Slot::kDense) b.dense[s.layer] = t;
    else b.values[s.layer] = t;
  }
  return b;
}

void PipelineEngine::forward_micro(int i, int chunk, int B, const FetchBatch& fetch,
                                   const OnLoss& on_loss, const PassHooks& hooks, bool keep,
                                   double& loss_sum, float grad_scale) {
  // Micro-batch i's ids are fetched by its first pass on this rank (chunk 0's forward: those
  // come in micro-batch order, so the loader is read in order) and kept for its other chunks.
  const int64_t N = static_cast<int64_t>(B) * model_.config().seq_len;
  if (static_cast<int>(ids_.size()) <= i) ids_.resize(i + 1);
  std::vector<int32_t>& ids = ids_[i];
  if (chunk == 0 && !prefetched_) {
    ids.resize(2 * N);
    fetch(i, ids.data(), ids.data() + N);
  }
  VT_CHECK(static_cast<int64_t>(ids.size()) == 2 * N);
  Activations acts;
  model_.start_activations(acts, ids.data(), ids.data() + N, B, chunk);
  if (chunk + 1 == model_.num_chunks()) std::vector<int32_t>().swap(ids);  // its last forward
  const int prev = prev_rank(chunk), next = next_rank(chunk);
  Bundle bundle = prev < 0 ? model_.embed_forward(acts, hooks)
                           : recv_bundle(model_.chunk_begin(chunk), B, prev, true);
  model_.blocks_forward(bundle, acts, hooks);
  if (next < 0) {
    loss_sum += model_.head_forward(bundle, acts,
                                    keep ? std::optional<float>(grad_scale) : std::nullopt);
    if (on_loss) on_loss(acts);
  } else {
    send_bundle(bundle, model_.chunk_end(chunk), B, next, true);
  }
  if (keep) {
    inflight_[chunk].push_back(std::move(acts));
    max_inflight_ = std::max(max_inflight_, ++inflight_total_);
  }
}

void PipelineEngine::backward_micro(int chunk, float grad_scale, const PassHooks& hooks) {
  std::vector<Activations>& fifo = inflight_.at(chunk);
  VT_CHECK(!fifo.empty());
  Activations acts = std::move(fifo.front());
  fifo.erase(fifo.begin());
  --inflight_total_;
  const int B = acts.B;
  const int prev = prev_rank(chunk), next = next_rank(chunk);
  Bundle grad = next < 0 ? model_.head_backward(acts, grad_scale)
                         : recv_bundle(model_.chunk_end(chunk), B, next, false);
  if (next < 0 && hooks.head_grads_done) hooks.head_grads_done();
  model_.blocks_backward(grad, acts, hooks);
  if (prev < 0)
    model_.embed_backward(grad, acts);
  else
    send_bundle(grad, model_.chunk_begin(chunk), B, prev, false);
}

bool PipelineEngine::next_forward(int i) {
  const int P = grid_.shape().pp, s = grid_.coords().pp;
  float go = 1.0f;
  if (s == 0) {
    // The first stage decides for the whole pipeline: every rank of the stage (tp x dp) votes,
    // so the data-parallel replicas and tensor-parallel ranks all end at the same micro-batch.
    if (stop_check_) {
      float stop = stop_check_() ? 1.0f : 0.0f;
      grid_.stage()->all_reduce_max(&stop, 1);
      go = stop > 0.0f ? 0.0f : 1.0f;
    }
  } else {
    const double t0 = now_s();
    grid_.pp()->recv(&go, 1, s - 1, kTagControl);
    rank_times_.wait_s += now_s() - t0;
  }
  if (s + 1 < P) grid_.pp()->send_async(&go, 1, s + 1, kTagControl);
  if (go == 0.0f) stopped_ = true;
  (void)i;
  return go != 0.0f;
}

void PipelineEngine::prepare_tables(int M, int B, const FetchBatch& fetch, bool with_grads) {
  prefetched_ = false;
  if (model_.host_tables().empty()) return;
  // The rows of host-kept value tables the pass reads go to the device before its first
  // forward, so every micro-batch's ids are read now (in order, as forward_micro would).
  const int64_t N = static_cast<int64_t>(B) * model_.config().seq_len;
  ids_.assign(M, std::vector<int32_t>(2 * N));
  std::vector<const int32_t*> inputs(M);
  for (int i = 0; i < M; ++i) {
    fetch(i, ids_[i].data(), ids_[i].data() + N);
    inputs[i] = ids_[i].data();
  }
  model_.prepare_table_rows(inputs, N, with_grads);
  prefetched_ = true;
}

double PipelineEngine::train_step(int M, int B, float grad_scale, const FetchBatch& fetch,
                                  const PassHooks& hooks) {
  // Backwards see layer_grads_done only in the last micro-batch's pass of each chunk.
  const PassHooks last_backward{{}, hooks.layer_grads_done, {}, hooks.head_grads_done, {}};
  const int P = grid_.shape().pp, s = grid_.coords().pp, V = model_.num_chunks();
  const double t_begin = now_s();
  rank_times_ = RankTimes{};
  times_ = StepTimes{};
  double loss_sum = 0.0;
  inflight_.assign(V, {});
  ids_.clear();
  inflight_total_ = max_inflight_ = 0;
  stopped_ = false;
  prepare_tables(M, B, fetch, true);
  // Micro-batches from `end` on are dropped: a stop request (next_forward, voted before each
  // micro-batch's first forward, which every rank meets before any other pass of that
  // micro-batch) ends the step there on every rank; the passes of earlier micro-batches still
  // run, so every message sent is received (dropping the later micro-batches' passes from a
  // deadlock-free order leaves one).
  int end = M;
  std::vector<int> backwards(V, 0);
  for (const PipelineOp& op : interleaved_1f1b(P, V, M, s)) {
    if (op.micro >= end) continue;
    const double t0 = now_s(), wait0 = rank_times_.wait_s;
    struct PassTimer {  // the pass's own time: its wall time less the waits inside it
      RankTimes& t;
      double t0, wait0;
      ~PassTimer() { t.pass_s.push_back(now_s() - t0 - (t.wait_s - wait0)); }
    } timer{rank_times_, t0, wait0};
    if (op.forward) {
      if (op.chunk == 0 && !next_forward(op.micro)) {
        end = op.micro;
        continue;
      }
      forward_micro(op.micro, op.chunk, B, fetch, {}, hooks, true, loss_sum, grad_scale);
    } else {
      // The last micro-batch's backward of a chunk finishes its layers' gradients: tell the
      // caller (not when a stop request ended the step early: its gradients are discarded).
      const bool last = ++backwards[op.chunk] == M;
      backward_micro(op.chunk, grad_scale, last ? last_backward : PassHooks{});
    }
  }
  grid_.pp()->wait_sends();
  if (prefetched_) model_.finish_table_rows();  // the rows' gradients into the host tables'
  prefetched_ = false;
  VT_CHECK(inflight_total_ == 0);
  // 1F1B's memory bound: pp - stage passes in flight; interleaved: the warm-up plus one (every
  // pass when M = pp: all forwards come first).
  const size_t bound = V == 1    ? static_cast<size_t>(P - s)
                       : M == P ? static_cast<size_t>(M * V)
                                : static_cast<size_t>(std::min(M * V, (P - s - 1) * 2 + (V - 1) * P + 1));
  VT_CHECK_MSG(max_inflight_ <= bound, "1F1B kept " << max_inflight_ << " passes on stage " << s);
  rank_times_.busy_s = now_s() - t_begin - rank_times_.wait_s;
  if (!stopped_) times_ = reduce_times(M);  // every rank of the group stopped, or none
  return loss_sum;
}

PipelineEngine::StepTimes PipelineEngine::reduce_times(int M) const {
  const int P = grid_.shape().pp;
  StepTimes r;
  double wait_busy[2] = {rank_times_.wait_s, rank_times_.busy_s};
  if (P > 1) grid_.pp()->all_reduce_sum(wait_busy, 2);
  r.wait_s = wait_busy[0] / P;
  r.busy_s = wait_busy[1] / P;
  if (P == 1) return r;
  const int64_t n = static_cast<int64_t>(rank_times_.pass_s.size());  // 2 M vpp on every rank
  std::vector<float> mine(rank_times_.pass_s.begin(), rank_times_.pass_s.end());
  std::vector<float> all(static_cast<size_t>(n) * P);
  grid_.pp()->all_gather(mine.data(), all.data(), n);
  std::vector<std::vector<double>> per_rank(P);
  for (int q = 0; q < P; ++q) {
    per_rank[q].assign(all.begin() + q * n, all.begin() + (q + 1) * n);
    double sum = 0;
    for (double x : per_rank[q]) sum += x;
    r.pass_s += sum / P;
    r.pass_max_s = std::max(r.pass_max_s, sum);
  }
  r.replay_s = replay_step_seconds(P, model_.num_chunks(), M, per_rank);
  return r;
}

double PipelineEngine::forward_only(int M, int B, const FetchBatch& fetch, const OnLoss& on_loss,
                                    const PassHooks& hooks) {
  // Each micro-batch through this rank's chunks in order: any M (no backward to interleave).
  double loss_sum = 0.0;
  stopped_ = false;
  ids_.clear();
  prepare_tables(M, B, fetch, false);
  for (int i = 0; i < M && next_forward(i); ++i)
    for (int c = 0; c < model_.num_chunks(); ++c) forward_micro(i, c, B, fetch, on_loss, hooks, false, loss_sum);
  grid_.pp()->wait_sends();
  if (prefetched_) model_.finish_table_rows();
  prefetched_ = false;
  return loss_sum;
}

}  // namespace vt
