// Validation loss / bpb and sampling.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "data/loader.h"
#include "model/decode.h"

namespace vt {

absl::StatusOr<EvalResult> evaluate(GPT& model, const std::string& data_dir, int B,
                                    int64_t max_tokens, const std::vector<int32_t>& token_bytes) {
  const ModelConfig& cfg = model.config();
  data::LoaderOptions lo;
  lo.vocab_size = cfg.vocab_size;
  VT_ASSIGN_OR_RETURN(data::DataLoader loader, data::DataLoader::open(data_dir, "val", lo));
  const int T = cfg.seq_len;
  // Never wrap around the split: evaluate distinct tokens only.
  const int64_t available = loader.tokens_per_epoch() - 1;
  // Whole batches of B rows only, as the trainer's evaluation reads them.
  int64_t rows = std::min<int64_t>(max_tokens, available) / T / B * B;
  if (rows < 1)
    return absl::FailedPreconditionError(absl::StrCat(
        "the validation split of ", data_dir, " has ", loader.tokens_per_epoch(),
        " tokens, fewer than one batch of ", B, " x ", T + 1,
        "; prepare with a larger --val-fraction or use a smaller --micro-batch"));
  double nats = 0, nats_bytes = 0;
  int64_t tokens = 0, bytes = 0;
  std::vector<int32_t> in, tg;
  while (rows > 0) {
    const int b = static_cast<int>(std::min<int64_t>(B, rows));
    in.resize(static_cast<size_t>(b) * T);
    tg.resize(in.size());
    VT_RETURN_IF_ERROR(loader.next_batch_into(b, T, 0, 1, in.data(), tg.data()));
    Activations acts;
    model.start_activations(acts, in.data(), tg.data(), b);
    Bundle bundle = model.embed_forward(acts);
    model.blocks_forward(bundle, acts);
    model.head_forward(bundle, acts);
    for (size_t n = 0; n < tg.size(); ++n) {
      const double l = acts.token_loss[n];
      nats += l;
      const int32_t nb = token_bytes.at(tg[n]);
      if (nb > 0) {
        nats_bytes += l;
        bytes += nb;
      }
    }
    tokens += static_cast<int64_t>(tg.size());
    rows -= b;
  }
  EvalResult r;
  r.tokens = tokens;
  r.loss = nats / tokens;
  r.bpb = bytes > 0 ? nats_bytes / (std::log(2.0) * bytes) : 0.0;
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
