// Validation loss / bpb and sampling.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "data/loader.h"
#include "model/decode.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "train/preflight.h"

namespace vt {

absl::StatusOr<EvalResult> evaluate(PipelineEngine& engine, const ProcessGrid& grid,
                                    const std::string& data_dir, int micro_batch,
                                    int64_t max_tokens, const std::vector<int32_t>& token_bytes,
                                    const std::string& size_flag) {
  const ModelConfig& cfg = engine.model().config();
  data::LoaderOptions lo;
  lo.vocab_size = cfg.vocab_size;
  auto val_or = data::DataLoader::open(data_dir, "val", lo);
  if (!val_or.ok()) return agreed(val_or.status());  // every rank reads the same directory
  data::DataLoader val = std::move(*val_or);
  const int64_t T = cfg.seq_len, dp = grid.shape().dp;
  const int64_t rows_per_micro = static_cast<int64_t>(micro_batch) * dp;
  // Distinct tokens only (never wrap around the split), whole global batches.
  auto micro_or = eval_micro_batches(data_dir, val.tokens_per_epoch(), T, micro_batch,
                                     static_cast<int>(dp), max_tokens, size_flag);
  if (!micro_or.ok()) return agreed(micro_or.status());  // the same on every rank
  const int micro = *micro_or;
  double sums[4] = {0, 0, 0, 0};  // nats, nats on byte tokens, bytes, tokens
  auto fetch = [&](int, int32_t* in, int32_t* tg) {
    absl::Status st = val.next_batch_into(rows_per_micro, T, grid.coords().dp, dp, in, tg);
    if (!st.ok()) abort_job(std::string(st.message()));
  };
  engine.forward_only(micro, micro_batch, fetch, [&](const Activations& acts) {
    for (size_t n = 0; n < acts.targets.size(); ++n) {
      const double l = acts.token_loss[n];
      sums[0] += l;
      const int32_t nb = token_bytes.at(acts.targets[n]);
      if (nb > 0) sums[1] += l, sums[2] += nb;
      sums[3] += 1;
    }
  });
  // Only the last stage saw losses; data-parallel replicas saw different rows.
  grid.pp()->all_reduce_sum(sums, 4);
  grid.dp()->all_reduce_sum(sums, 4);
  EvalResult r;
  r.tokens = static_cast<int64_t>(sums[3]);
  r.planned_tokens = static_cast<int64_t>(micro) * rows_per_micro * T;
  r.loss = sums[0] / sums[3];
  r.bpb = sums[2] > 0 ? sums[1] / (std::log(2.0) * sums[2]) : 0.0;
  return r;
}

std::vector<int32_t> sample(const GPT& model, const std::vector<int32_t>& prompt,
                            const SampleOptions& opts, int64_t* kv_bytes_per_token,
                            int64_t* baseline_kv_bytes_per_token) {
  const ModelConfig& cfg = model.config();
  std::vector<int32_t> ctx = prompt;
  if (ctx.empty()) ctx.push_back(0);
  // Keep the most recent tokens when prompt + generation exceed the trained context.
  const int max_len = cfg.seq_len;
  if (static_cast<int>(ctx.size()) >= max_len) ctx.erase(ctx.begin(), ctx.end() - (max_len - 1));
  const int budget = std::min<int>(opts.max_tokens, max_len - static_cast<int>(ctx.size()));
  Decoder dec(model, max_len);
  if (kv_bytes_per_token) *kv_bytes_per_token = dec.kv_bytes_per_token();
  if (baseline_kv_bytes_per_token) *baseline_kv_bytes_per_token = dec.baseline_kv_bytes_per_token();
  std::vector<float> logits;
  for (int32_t t : ctx) logits = dec.step(t);
  Rng rng(opts.seed);
  std::vector<int32_t> out;
  for (int i = 0; i < budget; ++i) {
    int32_t next = 0;
    if (opts.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::vector<int32_t> idx(logits.size());
      for (size_t j = 0; j < idx.size(); ++j) idx[j] = static_cast<int32_t>(j);
      size_t k = opts.top_k > 0 ? std::min<size_t>(opts.top_k, idx.size()) : idx.size();
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      std::vector<double> p(k);
      double sum = 0;
      for (size_t j = 0; j < k; ++j)
        sum += (p[j] = std::exp((logits[idx[j]] - logits[idx[0]]) / opts.temperature));
      double u = rng.uniform() * sum;
      next = idx[k - 1];
      for (size_t j = 0; j < k; ++j) {
        if ((u -= p[j]) <= 0) {
          next = idx[j];
          break;
        }
      }
    }
    out.push_back(next);
    if (i + 1 < budget) logits = dec.step(next);
  }
  return out;
}

}  // namespace vt
