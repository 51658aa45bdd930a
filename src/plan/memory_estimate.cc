// Memory estimate of one rank (see memory_estimate.h).
#include "plan/memory_estimate.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_format.h"
#include "model/dense.h"
#include "model/block_shape_kind.h"
#include "model/value_path.h"
#include "optim/distributed_optimizer.h"

namespace vt {

std::string MemoryEstimate::to_string() const {
  constexpr double G = 1024.0 * 1024.0 * 1024.0;
  return absl::StrFormat(
      "params %.2f GiB | grads %.2f%s | bf16 weights %.2f | optimizer %.2f | activations %.2f "
      "(+%.2f recomputed block, +%.2f backward temporaries) | logits %.2f | %s%s%stotal %.2f GiB%s",
      params / G, grads / G,
      grad_wire > 0 ? absl::StrFormat(" (+%.2f bf16 wire)", grad_wire / G) : "",
      compute_copy / G, optimizer / G, activations / G,
      recompute_transient / G, backward_transient / G, logits / G,
      zero_reduce + param_gather > 0
          ? absl::StrFormat("zero-2 buffers %.2f (reduce-scatter %.2f, parameter gather %.2f) | ",
                            std::max(zero_reduce, param_gather) / G, zero_reduce / G,
                            param_gather / G)
          : "",
      host_tables > 0 ? absl::StrFormat("table rows %.2f | ", table_rows / G) : "",
      fp8_weights > 0 ? absl::StrFormat("fp8 weights %.2f (+%.2f GEMM scratch) | ",
                                        fp8_weights / G, fp8_scratch / G)
                      : "",
      total() / G,
      host_tables > 0 ? absl::StrFormat(" (+ tables in host memory %.2f GiB)", host_tables / G)
                      : "");
}

MemoryEstimate estimate_memory(const ModelConfig& cfg, const ParamStore& store,
                               const GridShape& shape, const GridCoords& coords, int layers,
                               int B, DType act_dtype, Recompute recompute, int vpp,
                               int micro_batches, bool bf16_grad_wire, bool fp8,
                               int zero_stage) {
  MemoryEstimate m;
  double matrix = 0, other = 0, host = 0, host_width = 0;
  double head = 0;  // AdamW elements whose ZeRO-2 return is bf16 (the output head's weight)
  // Muon momentum: only for the matrices whose owner (optim/distributed_optimizer.h
  // muon_owners over the stage's tp x dp ranks) is in this rank's DP replica.
  double momentum = 0;
  std::vector<int64_t> matrix_elements;
  std::vector<double> matrix_local;
  for (const ParamInfo& p : store.infos())
    if (!p.host && p.group == ParamGroup::kMatrix) {
      matrix_elements.push_back(shape_numel(p.global_shape.empty() ? p.shape : p.global_shape));
      matrix_local.push_back(static_cast<double>(p.numel()));
    }
  const std::vector<int> owners = optim::muon_owners(matrix_elements, shape.tp * shape.dp);
  for (size_t k = 0; k < owners.size(); ++k)
    if (owners[k] / shape.tp == coords.dp) momentum += matrix_local[k];
  for (const ParamInfo& p : store.infos()) {
    if (p.host) {  // --table-offload: the table, its gradient and AdamW states in host memory
      host += static_cast<double>(p.numel());
      host_width += static_cast<double>(p.shape.back());
      continue;
    }
    (p.group == ParamGroup::kMatrix ? matrix : other) += static_cast<double>(p.numel());
    if (p.group == ParamGroup::kLmHead) head += static_cast<double>(p.numel());
  }
  m.host_tables = 8 * host + 8 * host / shape.dp;
  const double n = matrix + other;
  // Fixed tensors beside the parameters: the W0 of reparameterized projections (sas/sas-p: layer
  // 0's V and O, every layer's with --reparam-init; C x C/tp each) and --attn-bias's T x T bias
  // per layer.
  const bool simplified = cfg.block == BlockShapeKind::kSas || cfg.block == BlockShapeKind::kSasP;
  const double reparam = !simplified ? 0 : !cfg.reparam_init.empty() ? 2.0 * layers
                                                                      : (coords.pp == 0 ? 2 : 0);
  const double fixed = reparam * cfg.n_embd * (static_cast<double>(cfg.n_embd) / shape.tp) +
                       (cfg.attn_bias.empty() ? 0 : layers * static_cast<double>(cfg.seq_len) *
                                                        cfg.seq_len);
  m.params = 4 * (n + fixed);
  m.grads = 4 * n;
  m.grad_wire = bf16_grad_wire && shape.dp > 1 ? 2 * n : 0;
  m.compute_copy = act_dtype == DType::kBF16 ? 2 * n : 0;  // the bf16 weight copy
  m.optimizer = 4 * momentum + 8 * other / shape.dp;
  if (zero_stage == 2 && shape.dp > 1) {
    // Per rank: the packed input (dp chunks of ceil(n / dp): n, rounded up) and the owned sums
    // (n / dp); the gathers' send (n / dp) and receive (n) buffers, 2 bytes a value for the
    // head's weight where a bf16 compute copy exists, else 4.
    const double share = 1.0 + 1.0 / shape.dp;
    const double bf16_head = act_dtype == DType::kBF16 ? head : 0;
    m.zero_reduce = 4 * other * share;
    m.param_gather = (4 * (other - bf16_head) + 2 * bf16_head) * share;
  }
  if (zero_stage == 2 && shape.tp * shape.dp > 1) {
    // Muon's results stay in flight until the next forward: every rank of the stage holds each
    // whole orthogonalized matrix (bf16 with bf16 Newton-Schulz, the GPU default; f32 under f32
    // activations, where Newton-Schulz runs in f32 too).
    double global = 0;
    for (int64_t e : matrix_elements) global += static_cast<double>(e);
    m.param_gather += (act_dtype == DType::kBF16 ? 2 : 4) * global;
  }
  // Saved per token and layer (BlockActs): x_in, n1, x_mid, n2 (C each); q before RoPE and after
  // RoPE + QK-norm (one tensor, after RoPE, without QK-norm), the attention output (2-3
  // q-widths); k likewise, the context value, in target layers the mixed value and table rows
  // (up to 5 kv-widths); the MLP pre-activation and relu^2 (2 hidden); f32 norms' rstd and lse
  // (about 2 + 2 * heads floats).
  const double tp = shape.tp;
  const double C = cfg.n_embd, qd = cfg.q_dim() / tp, kvd = cfg.kv_dim() / tp,
               hidden = cfg.mlp_hidden() / tp, heads = cfg.n_head / tp;
  const double es = static_cast<double>(dtype_size(act_dtype));
  // The block shapes add: softmax attention's own output beside the mixed one when the attention
  // matrix is shaped (or NeuTRENO adds its term): one q-width; the sub-layer outputs their gains
  // multiply (sas: attention, MLP and the MLP skip's input; sas-p: two): C each.
  const bool mixed = cfg.block != BlockShapeKind::kPrenorm && cfg.block != BlockShapeKind::kParallel;
  const bool mix = mixed || cfg.value().attention_output_v1_coef(cfg) != 0.0f;
  const double gained = cfg.block == BlockShapeKind::kSas ? 3 : cfg.block == BlockShapeKind::kSasP ? 2 : 0;
  const double qk = cfg.use_qk_norm() ? 2 : 1;
  // A target layer keeps its context value and the mixed value (and table rows); any other
  // layer's value is its context value (TrainKit::attention): counted by the targets' share.
  double targets = 0;
  for (int i = 0; i < cfg.n_layer; ++i) targets += cfg.is_target(i) ? 1 : 0;
  const double target_share = targets / cfg.n_layer;
  const double values = 1 + target_share * (cfg.value().has_table() ? 2 : 1);
  const double per_token_layer =
      es * (4 * C + (qk + (mix ? 2 : 1)) * qd + (qk + values) * kvd +
            2 * hidden + gained * C) +
      4 * (2 + 2 * heads);
  const double tokens = static_cast<double>(B) * cfg.seq_len;
  // Host-kept tables: the rows the step's micro-batches read and their gradient, on the device.
  const double vocab_rows = static_cast<double>(cfg.vocab_padded) / shape.tp;
  m.table_rows = 8 * host_width * std::min(vocab_rows, tokens * std::max(1, micro_batches));
  // 1F1B warm-up depth + 1 passes of the stage; interleaved (vpp > 1): Megatron's warm-up + 1
  // passes of one chunk (layers / vpp), counted below as stage passes.
  const double in_flight =
      vpp == 1 ? std::max(1, shape.pp - coords.pp)
               : static_cast<double>((shape.pp - coords.pp - 1) * 2 + (vpp - 1) * shape.pp + 1) / vpp;
  // Plus the bundle (residual, x0, values kept for later layers) per micro-batch.
  // With recomputation a block keeps only its input (C values per token); one block's full
  // activations exist at a time, during its backward.
  // DenseFormer keeps each block's output for the averages (also under recomputation).
  // (Those a later average reads: with --dense-dilation / --dense-period not every one.)
  std::set<int> dense_read;
  if (cfg.dense)
    for (int i = 0; i < cfg.n_layer; ++i)
      for (int j : dense::inputs(cfg, i)) dense_read.insert(j);
  const double dense_kept = es * C * static_cast<double>(dense_read.size()) *
                            std::min(1.0, static_cast<double>(layers) / cfg.n_layer);
  // --recompute attn drops the attention core's outputs (softmax attention's output, the mixed one,
  // the QK-normed q and k, lse: model/recompute.h), --recompute mlp the MLP activation; each
  // block's backward rebuilds them, one block at a time.
  const double attn_core =
      es * ((mix ? 2 : 1) * qd + (cfg.use_qk_norm() ? qd + kvd : 0)) + 4 * heads;
  const double dropped = recompute == Recompute::kBlock ? per_token_layer - es * C
                         : recompute == Recompute::kAttn ? attn_core
                         : recompute == Recompute::kMlp  ? es * hidden
                                                         : 0.0;
  const double kept = layers * (per_token_layer - dropped) + dense_kept;
  // The bundle: the residual stream, x0 when the mode reads it, the context values later layers
  // read (V1, ...); on the first stage the embedding's saved rows and rstd and the token ids.
  double kept_values = 0;
  for (int i = 0; i < cfg.n_layer; ++i) kept_values += cfg.value().keeps_value(cfg, i) ? 1 : 0;
  const double bundle = es * (C + (cfg.value().reads_x0() ? C : 0) + kept_values * kvd) +
                        (coords.pp == 0 ? es * C + 4 + 8 : 0);
  m.activations = in_flight * tokens * (kept + bundle);
  m.recompute_transient = tokens * dropped;
  // One block's backward holds, besides what the blocks saved, the gradients of one sub-layer at
  // a time (model/train_kit.cc: mlp_backward's dact, dh (hidden each) and dn; attention_backward's
  // dy, dq (q-width each), dk, dv, V1's dv, dctx (kv-width each), dn and dx0 (C each)), the block
  // shape's gradients of a branch output and of its input (C each), and the attention
  // backward's f32 row terms (2 per head). Measured on the emulated device (tests/e2e
  // test_cli_plan.py, tests/unit/xent_loss_grad_test.cc): the MLP's 2 hidden + C is the peak.
  const double sub_layer = std::max(2 * hidden + C, 2 * qd + 4 * kvd + 2 * C);
  m.backward_transient = tokens * (es * (sub_layer + 2 * C) + 4 * 2 * heads);
  if (fp8) {
    // The Muon matrices (the blocks' linear weights; a reparameterized projection's dW is
    // multiplied through its effective matrix, not cached: counted anyway, an upper bound).
    m.fp8_weights = 2 * matrix;
    m.fp8_scratch = tokens * (C + hidden);
  }
  if (coords.pp == shape.pp - 1) {
    const double vocab_local = static_cast<double>(cfg.vocab_padded) / tp;
    // The logits and their gradient; with the head not vocabulary-sharded (tp 1) the training
    // loss end writes the gradient over the logits (GPT::head_forward): one buffer. Beside them
    // the head's (N, C) tensors: its norm's output, its gradient and the bundle's gradients
    // (x, and x0 where the value mode reads it), and f32 rstd, lse and loss per token.
    m.logits = tokens * (vocab_local * es * (tp == 1 ? 1 : 2) +
                         es * C * (cfg.value().reads_x0() ? 4 : 3) + 4 * 3);
  }
  return m;
}

}  // namespace vt
