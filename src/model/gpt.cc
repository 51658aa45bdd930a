// GPT: parameter registration and init, the embedding and loss ends of the network, and the
// orchestration of one forward/backward pass over this stage's blocks (each block's shape and
// sub-layers are in block_shape.h / train_kit.cc).
#include "model/gpt.h"

#include <cmath>

#include "core/ops.h"
#include "core/rng.h"
#include "model/attn_bias.h"
#include "model/block_shape.h"
#include "model/dense.h"
#include "model/param_registrar.h"
#include "model/smear_gate.h"
#include "parallel/tensor_parallel.h"

namespace vt {

GPT::GPT(const ModelConfig& config, const ModelParallel& parallel) : cfg_(config), par_(parallel) {
  VT_CHECK_MSG(cfg_.vocab_padded > 0, "ModelConfig::finalize() must be called first");
  shape_ = &vt::block_shape(cfg_.block);
  if (par_.chunks.empty())
    chunks_ = {{par_.layer_begin, par_.layer_end < 0 ? cfg_.n_layer : par_.layer_end}};
  else
    chunks_ = par_.chunks;
  local_.assign(cfg_.n_layer, -1);
  int n_local = 0, prev_end = 0;
  for (const auto& [b, e] : chunks_) {
    VT_CHECK_MSG(prev_end <= b && b < e && e <= cfg_.n_layer, "bad layer chunk [" << b << ", " << e << ")");
    for (int i = b; i < e; ++i) local_[i] = n_local++;
    prev_end = e;
  }
  const int tp = par_.tp_size();
  VT_CHECK_MSG(cfg_.n_head % tp == 0 && cfg_.n_kv_head % tp == 0 && cfg_.mlp_hidden() % tp == 0 &&
                   cfg_.vocab_padded % tp == 0,
               "tensor-parallel size " << tp << " does not divide the model");
  // This rank's shards (parallel/tensor_parallel.h): heads, KV heads, hidden units, vocabulary rows.
  const int r = par_.tp_rank();
  heads_ = static_cast<int>(tp::shard(cfg_.n_head, tp, r).size);
  kv_heads_ = static_cast<int>(tp::shard(cfg_.n_kv_head, tp, r).size);
  hidden_ = static_cast<int>(tp::shard(cfg_.mlp_hidden(), tp, r).size);
  const tp::Shard vocab = tp::shard(cfg_.vocab_padded, tp, r);
  vocab_rows_ = vocab.size;
  vocab_offset_ = vocab.offset;
}

GPT GPT::with_seq_len(int T) const {
  VT_CHECK(T >= 1 && T <= cfg_.seq_len);
  GPT g = *this;
  g.cfg_.short_window = cfg_.effective_short_window();
  g.cfg_.seq_len = T;
  g.attn_bias_.clear();  // the biases depend on T (the W0 slices do not)
  g.attn_rowscale_.clear();
  g.fixed_ready_ = false;
  return g;
}

bool GPT::keeps_dense(int j, int boundary) const { return dense::read_from(cfg_, j, boundary); }

void GPT::ensure_fixed() const {
  if (fixed_ready_) return;
  VT_CHECK(store_ && store_->finalized());
  const int tp = par_.tp_size(), r = par_.tp_rank();
  const int64_t C = cfg_.n_embd;
  for (int i = 0; i < cfg_.n_layer; ++i) {
    if (!holds_layer(i)) continue;
    LayerParams& lp = layers_[local(i)];
    for (Projection* p : {&lp.v, &lp.o}) {
      if (p->kind != Projection::Kind::kReparam || p->base.defined()) continue;
      const bool out = p == &lp.o;
      const std::vector<float> w0 = shape_->projection_base(cfg_, i, out);
      // V splits its columns over TP (like W_V), O its rows (like W_O).
      ParamInfo info;
      info.global_shape = {C, C};
      info.shape = out ? Shape{C / tp, C} : Shape{C, C / tp};
      info.split = {out ? 0 : 1, (C / tp) * r};
      Tensor local = Tensor::zeros(info.shape);
      copy_local_slice(w0, info, local.f32());
      p->base = Tensor::zeros(info.shape, DType::kF32, device());
      p->base.copy_from(local);
    }
  }
  attn_bias_.assign(layers_.size(), Tensor());
  attn_rowscale_.assign(layers_.size(), Tensor());
  if (!cfg_.attn_bias.empty()) {
    const int T = cfg_.seq_len;
    for (int i = 0; i < cfg_.n_layer; ++i) {
      if (!holds_layer(i)) continue;
      std::vector<float> b = spa_bias(cfg_, i, T);
      Tensor t = Tensor::zeros({T, T}, DType::kF32, device());
      t.copy_from(Tensor::view(b.data(), {T, T}));
      attn_bias_[local(i)] = t;
      if (cfg_.spa_rescale == "on") {
        std::vector<float> d = spa_rowscale(cfg_, i, T);
        Tensor r = Tensor::zeros({T}, DType::kF32, device());
        r.copy_from(Tensor::view(d.data(), {T}));
        attn_rowscale_[local(i)] = r;
      }
    }
  }
  fixed_ready_ = true;
}

bool GPT::keeps_value(int layer) const { return cfg_.value().keeps_value(cfg_, layer); }

const Tensor& GPT::attention_bias(int layer) const {
  ensure_fixed();
  return attn_bias_.at(local(layer));
}

const Tensor& GPT::attention_rowscale(int layer) const {
  ensure_fixed();
  return attn_rowscale_.at(local(layer));
}

ValueLayerCtx GPT::value_ctx(int layer, int64_t N, const Tensor& ids,
                             const std::vector<double>* coef, std::vector<double>* dcoef,
                             const Tensor& table_ids) const {
  ValueLayerCtx c;
  c.cfg = &cfg_;
  c.store = store_;
  c.params = &layer_params(layer).value;
  c.shared = &value_shared_;
  c.layer = layer;
  c.target_index = cfg_.target_index(layer);
  c.N = N;
  c.kv_heads = kv_heads_;
  c.tp = par_.tp_comm();
  c.vocab_offset = vocab_offset_;
  c.ids = ids;
  c.pass_coef = coef;
  c.pass_dcoef = dcoef;
  if (table_rows_.active() && table_ids.defined()) {
    c.table_rows = &table_rows_;
    c.table_ids = table_ids;
  }
  return c;
}

void GPT::prepare_table_rows(const std::vector<const int32_t*>& inputs, int64_t n_each,
                             bool with_grads) {
  VT_CHECK(store_ && store_->finalized());
  for (const int32_t* ids : inputs)
    for (int64_t n = 0; n < n_each; ++n)
      VT_CHECK_MSG(ids[n] >= 0 && ids[n] < cfg_.vocab_size,
                   "token id " << ids[n] << " outside the vocabulary [0, " << cfg_.vocab_size << ")");
  table_rows_.prepare(*store_, host_tables_, vocab_offset_, vocab_rows_, device(), inputs, n_each,
                      with_grads);
}

void GPT::finish_table_rows() { table_rows_.finish(*store_); }

void GPT::register_params(ParamStore& store) {
  store_ = &store;
  init_rules_.clear();
  ParamRegistrar r(store, init_rules_, cfg_, par_.tp_size(), par_.tp_rank());
  const int64_t C = cfg_.n_embd;
  if (is_first_stage())
    wte_ = r.add("wte", {cfg_.vocab_padded, C}, ParamGroup::kEmbedding, 0, wte_init(),
                 {});
  smear_ = smear::Params{};
  if (is_first_stage() && cfg_.smear_gate) smear_ = smear::register_params(r);
  // Value-mode parameters shared by the target layers of several stages live on every stage
  // (replicated over the pipeline: ParamMeta::pp_replicated; the trainer sums their gradients
  // over the pipeline group). Then each layer: the shape's parameters, then the value mode's,
  // so that a layer's parameters are contiguous in the arena.
  const ValuePath& vp = cfg_.value();
  value_shared_ = ValueSharedParams{};
  if (!cfg_.target_layers.empty()) vp.register_shared(r, value_shared_);
  layers_.clear();
  attn_bias_.clear();
  fixed_ready_ = false;
  for (int i = 0; i < cfg_.n_layer; ++i) {
    if (!holds_layer(i)) continue;  // chunks in increasing order: layers_ follows local_
    LayerParams lp;
    shape_->register_layer(r, i, lp);
    if (cfg_.is_target(i)) vp.register_layer(r, i, value_shared_, lp.value);
    lp.dwa = dense::register_weights(r, i);
    layers_.push_back(lp);
  }
  if (is_last_stage())
    lm_head_ = r.add("lm_head", {C, cfg_.vocab_padded}, ParamGroup::kLmHead, 1,
                     InitRule::normal(0.001), {});
  host_tables_.clear();
  table_rows_.clear();
  for (int i = 0; i < store.size(); ++i)
    if (store.info(i).host) {
      VT_CHECK_MSG(store.info(i).group == ParamGroup::kValueTable,
                   "only value tables can be kept in host memory, not " << store.info(i).name);
      host_tables_.push_back(i);
    }
}

std::vector<int> GPT::gemm_written_grads() const {
  std::vector<int> out;
  if (!fp8_)
    for (const LayerParams& lp : layers_) {
      for (int i : {lp.wq, lp.wk, lp.fc, lp.proj})
        if (i >= 0) out.push_back(i);
      for (const Projection* p : {&lp.v, &lp.o})
        if (p->kind == Projection::Kind::kMatrix && p->w >= 0) out.push_back(p->w);
    }
  if (lm_head_ >= 0) out.push_back(lm_head_);
  return out;
}

void GPT::init_params(uint64_t seed) {
  VT_CHECK(store_ && store_->finalized());
  VT_CHECK(static_cast<int>(init_rules_.size()) == store_->size());
  for (int idx = 0; idx < store_->size(); ++idx) {
    const ParamInfo& info = store_->info(idx);
    std::vector<float> global =
        generate_init(init_rules_[idx], info.name, shape_numel(info.global_shape), seed);
    Tensor local = Tensor::zeros(info.shape);
    copy_local_slice(global, info, local.f32());
    store_->param(idx).copy_from(local);
  }
  store_->refresh_compute_copy();
}

void GPT::start_activations(Activations& acts, const int32_t* inputs, const int32_t* targets,
                            int B, int chunk) const {
  const int64_t N = static_cast<int64_t>(B) * cfg_.seq_len;
  VT_CHECK(0 <= chunk && chunk < num_chunks());
  acts.B = B;
  acts.chunk = chunk;
  acts.inputs.assign(inputs, inputs + N);
  if (targets) acts.targets.assign(targets, targets + N);
  for (int64_t n = 0; n < N; ++n) {
    VT_CHECK_MSG(inputs[n] >= 0 && inputs[n] < cfg_.vocab_size,
                 "token id " << inputs[n] << " outside the vocabulary [0, " << cfg_.vocab_size << ")");
    if (targets)
      VT_CHECK_MSG(targets[n] >= 0 && targets[n] < cfg_.vocab_size,
                   "target id " << targets[n] << " outside the vocabulary");
  }
  acts.blocks.assign(chunk_end(chunk) - chunk_begin(chunk), BlockActs{});
  acts.input_ids = Tensor::from_host(acts.inputs.data(), {N}, device());
  if (table_rows_.active()) acts.table_ids = table_rows_.compact_ids(acts.inputs.data(), N);
  if (targets) acts.target_ids = Tensor::from_host(acts.targets.data(), {N}, device());
}

Bundle GPT::embed_forward(Activations& acts, const PassHooks& hooks) const {
  VT_CHECK(is_first_stage());
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  if (hooks.params_needed) hooks.params_needed(-1);
  acts.emb_raw = act({acts.B, cfg_.seq_len, C});
  ops::embedding(P(wte_), vocab_offset_, acts.input_ids, acts.emb_raw);
  tp::reduce_outputs(par_.tp_comm(), acts.emb_raw);
  acts.emb_rstd = f32({N});
  Bundle b;
  b.x = act({acts.B, cfg_.seq_len, C});
  ops::rmsnorm(acts.emb_raw, b.x, acts.emb_rstd, 1.0f, cfg_.norm_eps);
  // The smear gate mixes each position with the previous one of its row; what follows (x0, the
  // DenseFormer x_0) reads the smeared embedding, the first block's input, as in nanochat.
  if (smear_.on()) b.x = smear::forward(*store_, smear_, acts.B, cfg_.seq_len, b.x, acts.smear);
  if (hooks.block_output) hooks.block_output(-1, b.x);
  if (cfg_.value().reads_x0()) b.x0 = b.x.clone();
  b.values.resize(cfg_.n_layer);
  b.dense.resize(cfg_.n_layer + 1);
  if (keeps_dense(0, 0)) b.dense[0] = b.x.clone();  // x_0, read by later averages
  return b;
}

void GPT::blocks_forward(Bundle& bundle, Activations& acts, const PassHooks& hooks) const {
  ensure_fixed();
  if (bundle.values.empty()) bundle.values.resize(cfg_.n_layer);
  if (bundle.dense.empty()) bundle.dense.resize(cfg_.n_layer + 1);
  acts.x0 = bundle.x0;
  if (hooks.params_needed) hooks.params_needed(-1);
  if (!cfg_.target_layers.empty()) {
    cfg_.value().begin_pass(cfg_, *store_, value_shared_, acts.value_coef);
    acts.value_dcoef.assign(acts.value_coef.size(), 0.0);
  }
  const int begin = chunk_begin(acts.chunk), end = chunk_end(acts.chunk);
  // A block's last residual add is left to the next block, which makes it with its input copy
  // and first norm in one op (ops::add_rmsnorm), unless the stream is read between them: by a
  // hook, by DenseFormer's average, or after the chunk's last block (the head, the pipeline's
  // send); or unless the next block does not open with a norm of its input.
  const bool carry = !hooks.block_output && !hooks.block_state && !cfg_.dense;
  Tensor pending;  // the carried add
  for (int i = begin; i < end; ++i) {
    BlockActs& a = acts.blocks[i - begin];
    const Tensor in = std::move(pending);
    pending = Tensor();
    const bool defer = carry && i + 1 < end && shape_->opens_with_norm(cfg_, i + 1);
    if (hooks.params_needed) hooks.params_needed(i);
    block_forward(i, bundle, acts, a, in, defer ? &pending : nullptr);
    if (hooks.block_output) hooks.block_output(i, bundle.x);
    if (hooks.block_state) hooks.block_state(i, a, bundle, acts);
    if (cfg_.dense) dense_forward(i, bundle);
    drop_recomputed(a);
  }
  VT_CHECK(!pending.defined());
  if (hooks.params_needed && is_last_stage() && acts.chunk + 1 == num_chunks())
    hooks.params_needed(PassHooks::kHeadParams);
  acts.values = bundle.values;
  acts.dense = bundle.dense;
}

// What --recompute drops of a block's saved state once its forward (and the hooks) ran; the
// backward reruns it (whole blocks here, the attention core and MLP activation in TrainKit).
void GPT::drop_recomputed(BlockActs& a) const {
  switch (recompute_) {
    case Recompute::kOff:
      return;
    case Recompute::kBlock: {
      Tensor x_in = a.x_in;
      a = BlockActs{};
      a.x_in = x_in;
      return;
    }
    case Recompute::kAttn:
      a.y = a.y_soft = a.lse = Tensor();
      if (cfg_.use_qk_norm()) a.qn = a.kn = a.rstd_q = a.rstd_k = Tensor();
      return;
    case Recompute::kMlp:
      a.act = Tensor();
      return;
  }
}

void GPT::dense_forward(int i, Bundle& bundle) const {
  const std::vector<int> s = dense::inputs(cfg_, i);
  if (s.empty()) {
    // y_i = x_{i+1}: keep a copy when a later average reads x_{i+1} (the stream changes).
    if (keeps_dense(i + 1, i + 1)) bundle.dense[i + 1] = bundle.x.clone();
    return;
  }
  bundle.dense[i + 1] = bundle.x;  // the stream is replaced below: no copy needed
  const Tensor a = P(layers_[local(i)].dwa);
  Tensor y = act(bundle.x.shape());
  for (size_t k = 0; k < s.size(); ++k) ops::axpy_coef(y, bundle.dense[s[k]], a, k);
  bundle.x = y;
}

void GPT::dense_backward(int i, Bundle& grad, const Activations& acts) const {
  const std::vector<int> s = dense::inputs(cfg_, i);
  if (!s.empty()) {
    const int idx = layers_[local(i)].dwa;
    const Tensor a = P(idx), ga = G(idx);
    const Tensor dy = grad.x;
    Tensor dx = act(dy.shape());
    for (size_t k = 0; k < s.size(); ++k) {
      // Replicated over TP (x_j and y_i are full streams): every rank computes the same sums.
      Tensor d = f32({1});
      ops::dot_into(dy, acts.dense[s[k]], d);
      ops::axpy(ga.flat(k, 1), d, 1.0f);
      if (s[k] == i + 1) {
        ops::scale_copy_coef(dx, dy, a, k);
      } else {
        Tensor& g = grad.dense[s[k]];
        if (!g.defined()) g = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
        ops::axpy_coef(g, dy, a, k);
      }
    }
    grad.x = dx;
  }
  if (grad.dense[i + 1].defined()) {
    ops::axpy(grad.x, grad.dense[i + 1]);
    grad.dense[i + 1] = Tensor();
  }
}

void GPT::blocks_backward(Bundle& grad, Activations& acts, const PassHooks& hooks) const {
  if (grad.values.empty()) grad.values.resize(cfg_.n_layer);
  if (grad.dense.empty()) grad.dense.resize(cfg_.n_layer + 1);
  const int begin = chunk_begin(acts.chunk), end = chunk_end(acts.chunk);
  for (int i = end - 1; i >= begin; --i) {
    if (cfg_.dense) dense_backward(i, grad, acts);
    if (recompute_ == Recompute::kBlock) {
      // Rerun this block's forward from its saved input. Earlier layers' values and x0 come from
      // the saved forward state; what the rerun writes into its scratch bundle is dropped.
      Bundle scratch;
      scratch.x = acts.blocks[i - begin].x_in.clone();
      scratch.x0 = acts.x0;
      scratch.values = acts.values;
      scratch.dense.resize(cfg_.n_layer + 1);
      block_forward(i, scratch, acts, acts.blocks[i - begin]);
    }
    block_backward(i, grad, acts, acts.blocks[i - begin]);
    if (hooks.layer_grads_done) hooks.layer_grads_done(i);
    acts.blocks[i - begin] = BlockActs{};  // free as we go
  }
  if (!cfg_.target_layers.empty())
    cfg_.value().end_backward(cfg_, *store_, value_shared_, acts.value_coef, acts.value_dcoef);
}

double GPT::head_forward(const Bundle& bundle, Activations& acts,
                         std::optional<float> grad_scale) const {
  VT_CHECK(is_last_stage() && acts.target_ids.defined());
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  acts.head_x = bundle.x;
  acts.head_n = act({N, C});
  acts.head_rstd = f32({N});
  ops::rmsnorm(acts.head_x, acts.head_n, acts.head_rstd, 1.0f, cfg_.norm_eps);
  acts.logits = act({N, vocab_rows_});
  ops::matmul(acts.head_n, W(lm_head_), acts.logits);
  const XentArgs xa = xent_args(acts);
  acts.lse = f32({N});
  Tensor loss = acts.loss_out.defined() ? acts.loss_out : f32({N});
  VT_CHECK(loss.numel() == N && loss.dtype() == DType::kF32);
  if (grad_scale && par_.tp_size() == 1) {
    // The whole vocabulary is here: loss and gradient in one pass, the gradient in place.
    ops::xent_loss_grad(xa, *grad_scale, acts.lse, loss, acts.logits);
    acts.dlogits = std::move(acts.logits);
    acts.logits = Tensor();
    acts.dlogits_scale = *grad_scale;
  } else {
    Tensor row_max = f32({N}), row_sum = f32({N}), target_z = f32({N});
    ops::xent_partial(xa, row_max, row_sum, target_z);
    tp::combine_xent_stats(par_.tp_comm(), row_max, row_sum, target_z);  // the vocabulary shards
    ops::xent_finish(row_max, row_sum, target_z, acts.lse, loss);
  }
  if (acts.loss_out.defined()) return 0.0;  // left on the device
  acts.token_loss = loss.to_host_f32();
  double loss_sum = 0.0;
  for (float l : acts.token_loss) loss_sum += l;
  return loss_sum;
}

XentArgs GPT::xent_args(const Activations& acts) const {
  XentArgs xa;
  xa.logits = acts.logits;
  xa.n_valid = std::max<int64_t>(0, std::min<int64_t>(vocab_rows_, cfg_.vocab_size - vocab_offset_));
  xa.col_offset = vocab_offset_;
  xa.targets = acts.target_ids;
  xa.cap = static_cast<float>(cfg_.logit_softcap);
  return xa;
}

Bundle GPT::head_backward(Activations& acts, float grad_scale) const {
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  Tensor dlogits = std::move(acts.dlogits);
  acts.dlogits = Tensor();
  if (dlogits.defined()) {  // made by head_forward (the fused loss end)
    VT_CHECK_MSG(acts.dlogits_scale == grad_scale,
                 "head_backward's grad scale " << grad_scale << " differs from the "
                                               << acts.dlogits_scale << " head_forward used");
  } else {
    VT_CHECK_MSG(acts.logits.defined(), "head_backward needs head_forward's logits");
    dlogits = act({N, vocab_rows_});
    ops::xent_backward(xent_args(acts), acts.lse, grad_scale, dlogits);
  }
  ops::matmul_dw(acts.head_n, dlogits, G(lm_head_), !store_->take_first_write(lm_head_));
  Tensor dn = act({N, C});
  ops::matmul_dx(dlogits, W(lm_head_), dn, false);
  tp::reduce_input_grads(par_.tp_comm(), dn);
  Bundle g;
  g.x = act({acts.B, cfg_.seq_len, C});
  ops::rmsnorm_backward(acts.head_x, acts.head_rstd, dn, g.x, 1.0f, false);
  if (cfg_.value().reads_x0()) g.x0 = act({acts.B, cfg_.seq_len, C});
  g.values.resize(cfg_.n_layer);
  g.dense.resize(cfg_.n_layer + 1);
  // Free what the loss end no longer needs.
  acts.logits = Tensor();
  return g;
}

void GPT::embed_backward(Bundle& grad, Activations& acts) const {
  VT_CHECK(is_first_stage());
  Tensor d = grad.x;
  if (grad.x0.defined()) ops::axpy(d, grad.x0);
  if (!grad.dense.empty() && grad.dense[0].defined()) ops::axpy(d, grad.dense[0]);  // x_0
  if (smear_.on()) d = smear::backward(*store_, smear_, acts.B, cfg_.seq_len, acts.smear, d);
  Tensor demb = act(acts.emb_raw.shape());
  ops::rmsnorm_backward(acts.emb_raw, acts.emb_rstd, d, demb, 1.0f, false);
  ops::embedding_backward(demb, acts.input_ids, vocab_offset_, G(wte_));
}

void GPT::forward_backward_on_device(const Tensor& input_ids, const Tensor& target_ids, int B,
                                     float grad_scale, const Tensor& token_loss) {
  VT_CHECK_MSG(is_first_stage() && is_last_stage(), "forward_backward runs a single-stage model");
  VT_CHECK_MSG(!table_rows_.active(),
               "forward_backward_on_device: host-kept value tables read the ids on the host");
  const int64_t N = static_cast<int64_t>(B) * cfg_.seq_len;
  VT_CHECK(input_ids.numel() == N && target_ids.numel() == N && token_loss.numel() == N);
  VT_CHECK(input_ids.dtype() == DType::kI32 && target_ids.dtype() == DType::kI32);
  VT_CHECK(input_ids.device() == device() && target_ids.device() == device() &&
           token_loss.device() == device());
  Activations acts;
  acts.B = B;
  acts.chunk = 0;
  acts.blocks.assign(chunk_end(0) - chunk_begin(0), BlockActs{});
  acts.input_ids = input_ids;
  acts.target_ids = target_ids;
  acts.loss_out = token_loss;
  Bundle bundle = embed_forward(acts);
  blocks_forward(bundle, acts);
  head_forward(bundle, acts, grad_scale);
  Bundle grad = head_backward(acts, grad_scale);
  blocks_backward(grad, acts);
  embed_backward(grad, acts);
}

double GPT::forward_backward(const int32_t* inputs, const int32_t* targets, int B,
                             float grad_scale, bool backward) {
  VT_CHECK_MSG(is_first_stage() && is_last_stage(), "forward_backward runs a single-stage model");
  Activations acts;
  start_activations(acts, inputs, targets, B);
  Bundle bundle = embed_forward(acts);
  blocks_forward(bundle, acts);
  double loss_sum =
      head_forward(bundle, acts, backward ? std::optional<float>(grad_scale) : std::nullopt);
  if (backward) {
    Bundle grad = head_backward(acts, grad_scale);
    blocks_backward(grad, acts);
    embed_backward(grad, acts);
  }
  return loss_sum;
}

}  // namespace vt
