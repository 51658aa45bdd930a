// GPT: parameter registration and init, the embedding and loss ends of the network, and the
// orchestration of one forward/backward pass. The transformer block and its value path are in
// block.cc.
#include "model/gpt.h"

#include <cmath>

#include "core/cpu_kernels.h"
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
    copy_local_slice(global, info, store_->param(idx).f32());
  }
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
}

Bundle GPT::embed_forward(Activations& acts) const {
  VT_CHECK(is_first_stage());
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  acts.emb_raw = Tensor::zeros({acts.B, cfg_.seq_len, C});
  ops::embedding(P(wte_), vocab_offset_, acts.inputs.data(), acts.emb_raw);
  par_.tp_comm()->all_reduce_sum(acts.emb_raw.f32(), N * C);
  acts.emb_rstd = Tensor::zeros({N});
  Bundle b;
  b.x = Tensor::zeros({acts.B, cfg_.seq_len, C});
  ops::rmsnorm(acts.emb_raw, b.x, acts.emb_rstd, 1.0f, cfg_.norm_eps);
  if (mode_reads_x0(cfg_.value_mode)) b.x0 = b.x.clone();
  b.values.resize(cfg_.n_layer);
  return b;
}

double GPT::head_forward(const Bundle& bundle, Activations& acts) const {
  VT_CHECK(is_last_stage() && !acts.targets.empty());
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  acts.head_x = bundle.x;
  acts.head_n = Tensor::zeros({N, C});
  acts.head_rstd = Tensor::zeros({N});
  ops::rmsnorm(acts.head_x, acts.head_n, acts.head_rstd, 1.0f, cfg_.norm_eps);
  acts.logits = Tensor::zeros({N, vocab_rows_});
  ops::matmul(acts.head_n, P(lm_head_), acts.logits);
  const int64_t n_valid =
      std::max<int64_t>(0, std::min<int64_t>(vocab_rows_, cfg_.vocab_size - vocab_offset_));
  std::vector<float> row_max(N), row_sum(N), target_z(N);
  cpu::xent_partial_forward<float>(acts.logits.f32(), N, vocab_rows_, n_valid, vocab_offset_,
                                   acts.targets.data(), static_cast<float>(cfg_.logit_softcap),
                                   row_max.data(), row_sum.data(), target_z.data());
  Communicator* tp = par_.tp_comm();
  if (tp->size() > 1) {
    std::vector<float> global_max = row_max;
    tp->all_reduce_max(global_max.data(), N);
    for (int64_t n = 0; n < N; ++n) row_sum[n] *= std::exp(row_max[n] - global_max[n]);
    tp->all_reduce_sum(row_sum.data(), N);
    tp->all_reduce_sum(target_z.data(), N);
    row_max = global_max;
  }
  acts.lse = Tensor::zeros({N});
  acts.token_loss.resize(N);
  double loss_sum = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float lse = row_max[n] + std::log(row_sum[n]);
    acts.lse.f32()[n] = lse;
    acts.token_loss[n] = lse - target_z[n];
    loss_sum += static_cast<double>(lse) - target_z[n];
  }
  return loss_sum;
}

Bundle GPT::head_backward(Activations& acts, float grad_scale) const {
  const int64_t N = static_cast<int64_t>(acts.B) * cfg_.seq_len, C = cfg_.n_embd;
  const int64_t n_valid =
      std::max<int64_t>(0, std::min<int64_t>(vocab_rows_, cfg_.vocab_size - vocab_offset_));
  Tensor dlogits = Tensor::zeros({N, vocab_rows_});
  std::vector<float> dloss(N, grad_scale);
  cpu::xent_backward<float>(acts.logits.f32(), N, vocab_rows_, n_valid, vocab_offset_,
                            acts.targets.data(), static_cast<float>(cfg_.logit_softcap),
                            acts.lse.f32(), dloss.data(), dlogits.f32());
  ops::matmul_dw(acts.head_n, dlogits, G(lm_head_));
  Tensor dn = Tensor::zeros({N, C});
  ops::matmul_dx(dlogits, P(lm_head_), dn, false);
  par_.tp_comm()->all_reduce_sum(dn.f32(), N * C);
  Bundle g;
  g.x = Tensor::zeros({acts.B, cfg_.seq_len, C});
  ops::rmsnorm_backward(acts.head_x, acts.head_rstd, dn, g.x, 1.0f, false);
  if (mode_reads_x0(cfg_.value_mode)) g.x0 = Tensor::zeros({acts.B, cfg_.seq_len, C});
  g.values.resize(cfg_.n_layer);
  // Free what the loss end no longer needs.
  acts.logits = Tensor();
  return g;
}

void GPT::embed_backward(Bundle& grad, Activations& acts) const {
  VT_CHECK(is_first_stage());
  Tensor d = grad.x;
  if (grad.x0.defined()) ops::axpy(d, grad.x0);
  Tensor demb = Tensor::zeros(acts.emb_raw.shape());
  ops::rmsnorm_backward(acts.emb_raw, acts.emb_rstd, d, demb, 1.0f, false);
  ops::embedding_backward(demb, acts.inputs.data(), vocab_offset_, G(wte_));
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
