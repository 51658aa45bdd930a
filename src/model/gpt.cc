// GPT: parameter registration and init, the embedding and loss ends of the network, and the
// orchestration of one forward/backward pass. The transformer block and its value path are in
// block.cc.
#include "model/gpt.h"

#include <cmath>

#include "core/ops.h"
#include "core/rng.h"
#include "model/init.h"

namespace vt {

GPT::GPT(const ModelConfig& config, const ModelParallel& parallel) : cfg_(config), par_(parallel) {
  VT_CHECK_MSG(cfg_.vocab_padded > 0, "ModelConfig::finalize() must be called first");
  begin_ = par_.layer_begin;
  end_ = par_.layer_end < 0 ? cfg_.n_layer : par_.layer_end;
  VT_CHECK(0 <= begin_ && begin_ < end_ && end_ <= cfg_.n_layer);
  const int tp = par_.tp_size();
  VT_CHECK_MSG(cfg_.n_head % tp == 0 && cfg_.n_kv_head % tp == 0 && cfg_.mlp_hidden() % tp == 0 &&
                   cfg_.vocab_padded % tp == 0,
               "tensor-parallel size " << tp << " does not divide the model");
  heads_ = cfg_.n_head / tp;
  kv_heads_ = cfg_.n_kv_head / tp;
  hidden_ = cfg_.mlp_hidden() / tp;
  vocab_rows_ = cfg_.vocab_padded / tp;
  vocab_offset_ = vocab_rows_ * par_.tp_rank();
}

GPT GPT::with_seq_len(int T) const {
  VT_CHECK(T >= 1 && T <= cfg_.seq_len);
  GPT g = *this;
  g.cfg_.short_window = cfg_.effective_short_window();
  g.cfg_.seq_len = T;
  return g;
}

bool GPT::keeps_value(int layer) const {
  if (cfg_.target_layers.empty()) return false;
  const int last_target = cfg_.target_layers.back();
  if (mode_reads_all_values(cfg_.value_mode)) return layer < last_target;
  if (mode_reads_v1(cfg_.value_mode)) return layer == 0;
  return false;
}

void GPT::register_params(ParamStore& store) {
  store_ = &store;
  const int64_t C = cfg_.n_embd, hd = cfg_.head_dim, Vp = cfg_.vocab_padded;
  const int r = par_.tp_rank();
  auto col_split = [](int64_t offset) { return ParamSplit{1, offset}; };
  auto row_split = [](int64_t offset) { return ParamSplit{0, offset}; };
  if (is_first_stage())
    wte_ = store.add("wte", {vocab_rows_, C}, ParamGroup::kEmbedding, {Vp, C},
                     row_split(vocab_offset_));
  bool any_target = false;
  for (int i = begin_; i < end_; ++i) {
    LayerParams lp;
    const std::string p = "blocks." + std::to_string(i) + ".";
    const int64_t qd = heads_ * hd, kvd = kv_heads_ * hd;
    lp.wq = store.add(p + "attn.wq", {C, qd}, ParamGroup::kMatrix, {C, cfg_.q_dim()},
                      col_split(r * qd));
    lp.wk = store.add(p + "attn.wk", {C, kvd}, ParamGroup::kMatrix, {C, cfg_.kv_dim()},
                      col_split(r * kvd));
    if (cfg_.layer_has_wv(i))
      lp.wv = store.add(p + "attn.wv", {C, kvd}, ParamGroup::kMatrix, {C, cfg_.kv_dim()},
                        col_split(r * kvd));
    lp.wo = store.add(p + "attn.wo", {qd, C}, ParamGroup::kMatrix, {cfg_.q_dim(), C},
                      row_split(r * qd));
    lp.fc = store.add(p + "mlp.fc", {C, hidden_}, ParamGroup::kMatrix, {C, cfg_.mlp_hidden()},
                      col_split(r * hidden_));
    lp.proj = store.add(p + "mlp.proj", {hidden_, C}, ParamGroup::kMatrix,
                        {cfg_.mlp_hidden(), C}, row_split(r * hidden_));
    if (cfg_.is_target(i)) {
      any_target = true;
      auto scalar = [&](const char* name) {
        return store.add(p + "value." + name, {1}, ParamGroup::kScalar);
      };
      auto table = [&](const std::string& name) {
        return store.add(name, {vocab_rows_, cfg_.kv_dim()}, ParamGroup::kValueTable,
                         {Vp, cfg_.kv_dim()}, row_split(vocab_offset_));
      };
      switch (cfg_.value_mode) {
        case ValueMode::kResformerLearnable:
          lp.lambda1 = scalar("lambda1");
          lp.lambda2 = scalar("lambda2");
          break;
        case ValueMode::kResformerPlus:
          lp.lambda2 = scalar("lambda2");
          break;
        case ValueMode::kResformerDense:
          lp.dense = store.add(p + "value.dense", {i + 1}, ParamGroup::kScalar);
          break;
        case ValueMode::kV1:
        case ValueMode::kX0v:
          lp.gain = scalar("gain");
          break;
        case ValueMode::kBov:
          lp.gain = scalar("gain");
          if (!cfg_.shared_table) lp.table = table(p + "value.table");
          break;
        case ValueMode::kBovAdd:
          if (!cfg_.bov_add_fixed) {
            lp.a = scalar("a");
            lp.b = scalar("b");
          }
          lp.table = table(p + "value.table");
          break;
        case ValueMode::kValueEmbed:
          lp.table = table(p + "value.table");
          lp.gate_w = store.add(p + "value.gate_w", {cfg_.value_embed_gate_channels, kv_heads_},
                                ParamGroup::kMatrix,
                                {cfg_.value_embed_gate_channels, cfg_.n_kv_head},
                                col_split(r * kv_heads_));
          break;
        default:
          break;
      }
    }
    layers_.push_back(lp);
  }
  // Parameters shared by target layers of several stages live on every stage (replicated over
  // the pipeline; the trainer sums their gradients over the pipeline group).
  any_target = !cfg_.target_layers.empty();
  if (any_target && cfg_.value_mode == ValueMode::kResformerPlus)
    plus_logits_ = store.add("value_plus.logits", {static_cast<int64_t>(cfg_.target_layers.size())},
                             ParamGroup::kScalar);
  if (any_target && cfg_.shared_table) {
    shared_table_ = store.add("value.table", {vocab_rows_, cfg_.kv_dim()}, ParamGroup::kValueTable,
                              {Vp, cfg_.kv_dim()}, row_split(vocab_offset_));
    for (int i = begin_; i < end_; ++i)
      if (cfg_.is_target(i)) layers_[i - begin_].table = shared_table_;
  }
  if (is_last_stage())
    lm_head_ = store.add("lm_head", {C, vocab_rows_}, ParamGroup::kLmHead, {C, Vp},
                         col_split(vocab_offset_));
}

void GPT::init_params(uint64_t seed) {
  VT_CHECK(store_ && store_->finalized());
  for (int idx = 0; idx < store_->size(); ++idx) {
    const ParamInfo& info = store_->info(idx);
    std::vector<float> global = init_global_param(cfg_, info.name, info.global_shape, seed);
    Tensor local = Tensor::zeros(info.shape);
    copy_local_slice(global, info, local.f32());
    store_->param(idx).copy_from(local);
  }
  store_->refresh_compute_copy();
}

void GPT::start_activations(Activations& acts, const int32_t* inputs, const int32_t* targets,
                            int B) const {
  const int64_t N = static_cast<int64_t>(B) * cfg_.seq_len;
  acts.B = B;
  acts.inputs.assign(inputs, inputs + N);
  if (targets) acts.targets.assign(targets, targets + N);
  for (int64_t n = 0; n < N; ++n) {
    VT_CHECK_MSG(inputs[n] >= 0 && inputs[n] < cfg_.vocab_size,
                 "token id " << inputs[n] << " outside the vocabulary [0, " << cfg_.vocab_size << ")");
    if (targets)
      VT_CHECK_MSG(targets[n] >= 0 && targets[n] < cfg_.vocab_size,
                   "target id " << targets[n] << " outside the vocabulary");
  }
  acts.blocks.assign(end_ - begin_, BlockActs{});
  acts.input_ids = Tensor::from_host(acts.inputs.data(), {N}, device());
  if (targets) acts.target_ids = Tensor::from_host(acts.targets.data(), {N}, device());
}

Bundle GPT::embed_forward(Activations& acts) const {
  VT_CHECK(is_first_stage());
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  acts.emb_raw = act({acts.B, cfg_.seq_len, C});
  ops::embedding(P(wte_), vocab_offset_, acts.input_ids, acts.emb_raw);
  par_.tp_comm()->all_reduce_sum(acts.emb_raw);
  acts.emb_rstd = f32({N});
  Bundle b;
  b.x = act({acts.B, cfg_.seq_len, C});
  ops::rmsnorm(acts.emb_raw, b.x, acts.emb_rstd, 1.0f, cfg_.norm_eps);
  if (block_output_hook_) block_output_hook_(-1, b.x);
  if (mode_reads_x0(cfg_.value_mode)) b.x0 = b.x.clone();
  b.values.resize(cfg_.n_layer);
  return b;
}

double GPT::head_forward(const Bundle& bundle, Activations& acts) const {
  VT_CHECK(is_last_stage() && !acts.targets.empty());
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  acts.head_x = bundle.x;
  acts.head_n = act({N, C});
  acts.head_rstd = f32({N});
  ops::rmsnorm(acts.head_x, acts.head_n, acts.head_rstd, 1.0f, cfg_.norm_eps);
  acts.logits = act({N, vocab_rows_});
  ops::matmul(acts.head_n, W(lm_head_), acts.logits);
  const XentArgs xa = xent_args(acts);
  Tensor row_max = f32({N}), row_sum = f32({N}), target_z = f32({N});
  ops::xent_partial(xa, row_max, row_sum, target_z);
  Communicator* tp = par_.tp_comm();
  if (tp->size() > 1) {
    // Combine the vocabulary shards: global max, sums rescaled to it, the one target logit.
    Tensor global_max = row_max.clone();
    tp->all_reduce_max(global_max);
    ops::xent_rescale(row_sum, row_max, global_max);
    tp->all_reduce_sum(row_sum);
    tp->all_reduce_sum(target_z);
    row_max = global_max;
  }
  acts.lse = f32({N});
  Tensor loss = f32({N});
  ops::xent_finish(row_max, row_sum, target_z, acts.lse, loss);
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
  Tensor dlogits = act({N, vocab_rows_});
  ops::xent_backward(xent_args(acts), acts.lse, grad_scale, dlogits);
  ops::matmul_dw(acts.head_n, dlogits, G(lm_head_));
  Tensor dn = act({N, C});
  ops::matmul_dx(dlogits, W(lm_head_), dn, false);
  par_.tp_comm()->all_reduce_sum(dn);
  Bundle g;
  g.x = act({acts.B, cfg_.seq_len, C});
  ops::rmsnorm_backward(acts.head_x, acts.head_rstd, dn, g.x, 1.0f, false);
  if (mode_reads_x0(cfg_.value_mode)) g.x0 = act({acts.B, cfg_.seq_len, C});
  g.values.resize(cfg_.n_layer);
  // Free what the loss end no longer needs.
  acts.logits = Tensor();
  return g;
}

void GPT::embed_backward(Bundle& grad, Activations& acts) const {
  VT_CHECK(is_first_stage());
  Tensor d = grad.x;
  if (grad.x0.defined()) ops::axpy(d, grad.x0);
  Tensor demb = act(acts.emb_raw.shape());
  ops::rmsnorm_backward(acts.emb_raw, acts.emb_rstd, d, demb, 1.0f, false);
  ops::embedding_backward(demb, acts.input_ids, vocab_offset_, G(wte_));
}

double GPT::forward_backward(const int32_t* inputs, const int32_t* targets, int B,
                             float grad_scale, bool backward) {
  VT_CHECK_MSG(is_first_stage() && is_last_stage(), "forward_backward runs a single-stage model");
  Activations acts;
  start_activations(acts, inputs, targets, B);
  Bundle bundle = embed_forward(acts);
  blocks_forward(bundle, acts);
  double loss_sum = head_forward(bundle, acts);
  if (backward) {
    Bundle grad = head_backward(acts, grad_scale);
    blocks_backward(grad, acts);
    embed_backward(grad, acts);
  }
  return loss_sum;
}

}  // namespace vt
