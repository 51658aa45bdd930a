// 1F1B pipeline schedule and bundle exchange (see pipeline.h).
#include "parallel/pipeline.h"

#include <algorithm>

#include "core/check.h"
#include "model/value_path.h"

namespace vt {

namespace {
constexpr int kTagForward = 11;
constexpr int kTagBackward = 12;
constexpr int kTagControl = 13;  // "micro-batch i goes ahead" (1) or "the step ends here" (0)
}  // namespace

PipelineEngine::PipelineEngine(GPT& model, const ProcessGrid& grid) : model_(model), grid_(grid) {}

std::vector<PipelineEngine::Slot> PipelineEngine::boundary_slots(int boundary) const {
  const ModelConfig& cfg = model_.config();
  std::vector<Slot> slots = {{Slot::kX, -1}};
  if (cfg.value().context_from_x0()) slots.push_back({Slot::kX0, -1});
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

void PipelineEngine::send_bundle(const Bundle& b, int boundary, int B, int peer, int tag) {
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
  grid_.pp()->send_async(buf, peer, tag);
}

Bundle PipelineEngine::recv_bundle(int boundary, int B, int peer, int tag) {
  const ModelConfig& cfg = model_.config();
  const std::vector<Slot> slots = boundary_slots(boundary);
  int64_t total = 0;
  for (const Slot& s : slots) total += slot_numel(s, B);
  Tensor buf = Tensor::zeros({total}, model_.act_dtype(), model_.device());
  grid_.pp()->recv(buf, peer, tag);
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

void PipelineEngine::forward_micro(int i, int B, const FetchBatch& fetch, const OnLoss& on_loss,
                                   bool keep, double& loss_sum) {
  const int64_t N = static_cast<int64_t>(B) * model_.config().seq_len;
  in_.resize(N);
  tg_.resize(N);
  fetch(i, in_.data(), tg_.data());
  Activations acts;
  model_.start_activations(acts, in_.data(), tg_.data(), B);
  Bundle bundle = grid_.is_first_stage()
                      ? model_.embed_forward(acts)
                      : recv_bundle(model_.layer_begin(), B, grid_.coords().pp - 1, kTagForward);
  model_.blocks_forward(bundle, acts);
  if (grid_.is_last_stage()) {
    loss_sum += model_.head_forward(bundle, acts);
    if (on_loss) on_loss(acts);
  } else {
    send_bundle(bundle, model_.layer_end(), B, grid_.coords().pp + 1, kTagForward);
  }
  if (keep) {
    inflight_.push_back(std::move(acts));
    max_inflight_ = std::max(max_inflight_, inflight_.size());
  }
}

void PipelineEngine::backward_micro(float grad_scale, const std::function<void(int)>& layer_hook) {
  VT_CHECK(!inflight_.empty());
  Activations acts = std::move(inflight_.front());
  inflight_.erase(inflight_.begin());
  const int B = acts.B;
  Bundle grad = grid_.is_last_stage()
                    ? model_.head_backward(acts, grad_scale)
                    : recv_bundle(model_.layer_end(), B, grid_.coords().pp + 1, kTagBackward);
  model_.set_layer_grads_hook(layer_hook);
  model_.blocks_backward(grad, acts);
  model_.set_layer_grads_hook({});
  if (grid_.is_first_stage())
    model_.embed_backward(grad, acts);
  else
    send_bundle(grad, model_.layer_begin(), B, grid_.coords().pp - 1, kTagBackward);
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
    grid_.pp()->recv(&go, 1, s - 1, kTagControl);
  }
  if (s + 1 < P) grid_.pp()->send_async(&go, 1, s + 1, kTagControl);
  if (go == 0.0f) stopped_ = true;
  (void)i;
  return go != 0.0f;
}

double PipelineEngine::train_step(int M, int B, float grad_scale, const FetchBatch& fetch,
                                  const std::function<void(int)>& on_last_layer_grads) {
  const int P = grid_.shape().pp, s = grid_.coords().pp;
  const int warmup = std::min(P - s - 1, M);
  double loss_sum = 0.0;
  inflight_.clear();
  stopped_ = false;
  int forwards = 0, backwards = 0;
  // The last micro-batch's backward finishes each layer's gradients: tell the caller (not when
  // a stop request ended the step early: its gradients are discarded).
  auto backward = [&] {
    ++backwards;
    backward_micro(grad_scale, backwards == M ? on_last_layer_grads : std::function<void(int)>());
  };
  // 1F1B over at most M micro-batches: warm-up forwards, then one forward and one backward, then
  // the remaining backwards. A stop request (next_forward) ends the forwards early on every
  // stage at the same micro-batch; the cool-down still finishes what is in flight.
  auto forward = [&]() -> bool {
    if (stopped_ || forwards == M || !next_forward(forwards)) return false;
    forward_micro(forwards++, B, fetch, {}, true, loss_sum);
    return true;
  };
  for (int i = 0; i < warmup && forward(); ++i) {
  }
  while (forwards < M && forward()) backward();
  while (backwards < forwards) backward();
  grid_.pp()->wait_sends();
  VT_CHECK(inflight_.empty());
  VT_CHECK_MSG(max_inflight_ <= static_cast<size_t>(P - s),
               "1F1B kept " << max_inflight_ << " micro-batches on stage " << s);
  return loss_sum;
}

double PipelineEngine::forward_only(int M, int B, const FetchBatch& fetch, const OnLoss& on_loss) {
  double loss_sum = 0.0;
  stopped_ = false;
  for (int i = 0; i < M && next_forward(i); ++i) forward_micro(i, B, fetch, on_loss, false, loss_sum);
  grid_.pp()->wait_sends();
  return loss_sum;
}

}  // namespace vt
