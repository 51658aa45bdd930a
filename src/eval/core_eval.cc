// evaluate_core (see core_eval.h): examples through the pipeline engine's forward, scores from the
// per-token losses (multiple_choice / schema) and from the logits' argmax (language_modeling,
// combined over the tensor-parallel vocabulary shards).
#include "eval/core_eval.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "eval/core_prompts.h"
#include "pipeline/pipeline.h"

namespace vt::eval {
namespace {

constexpr int kPadMultiple = 64;

// Per position of rows [first, first + n) of the logits: the largest (soft-capped) logit over the
// real vocabulary and its lowest global index, combined over the TP group (torch.argmax's rule).
std::vector<int64_t> argmax_rows(const GPT& model, const Activations& acts, int64_t first, int64_t n) {
  const ModelConfig& cfg = model.config();
  const Tensor& logits = acts.logits;
  const int64_t V_local = logits.dim(1);
  const int64_t offset = V_local * model.parallel().tp_rank();
  const std::vector<float> host = logits.flat(first * V_local, n * V_local).to_host_f32();
  const float cap = static_cast<float>(cfg.logit_softcap);
  std::vector<float> mine(2 * n);
  for (int64_t r = 0; r < n; ++r) {
    float best = -INFINITY;
    int64_t at = -1;
    for (int64_t c = 0; c < V_local && offset + c < cfg.vocab_size; ++c) {
      float z = host[r * V_local + c];
      if (cap > 0) z = cap * std::tanh(z / cap);
      if (at < 0 || z > best) best = z, at = offset + c;
    }
    mine[2 * r] = best;
    mine[2 * r + 1] = static_cast<float>(at);  // exact: vocabularies are far below 2^24
  }
  Communicator* tp = model.parallel().tp_comm();
  std::vector<float> all(2 * n * tp->size());
  tp->all_gather(mine.data(), all.data(), 2 * n);
  std::vector<int64_t> out(n, -1);
  for (int64_t r = 0; r < n; ++r) {
    float best = -INFINITY;
    for (int k = 0; k < tp->size(); ++k) {
      const float v = all[k * 2 * n + 2 * r];
      const int64_t idx = static_cast<int64_t>(all[k * 2 * n + 2 * r + 1]);
      if (idx < 0) continue;  // a shard of padding columns only
      if (out[r] < 0 || v > best || (v == best && idx < out[r])) best = v, out[r] = idx;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<CoreResult> evaluate_core(const GPT& model, const ProcessGrid& grid,
                                         const std::vector<CoreTask>& tasks,
                                         const data::Tokenizer& tok,
                                         const std::function<void(const std::string&)>& progress) {
  const ModelConfig& cfg = model.config();
  if (tok.vocab_size() != cfg.vocab_size)
    return absl::InvalidArgumentError(absl::StrFormat(
        "the tokenizer has %d tokens, the model %d; evaluate with the tokenizer it was trained with",
        tok.vocab_size(), cfg.vocab_size));
  const int dp = grid.shape().dp, replica = grid.coords().dp;
  const int32_t bos = tok.bos_id();
  CoreResult result;
  for (const CoreTask& task : tasks) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n = static_cast<int64_t>(task.data.size());
    double correct = 0;
    absl::Status st;
    for (int64_t idx = replica; idx < n && st.ok(); idx += dp) {
      auto ex = build_core_example(task, idx, tok, cfg.seq_len);
      if (!ex.ok()) {
        st = ex.status();
        break;
      }
      const int B = static_cast<int>(ex->rows.size());
      int longest = 1;
      for (const auto& r : ex->rows) longest = std::max<int>(longest, static_cast<int>(r.size()));
      const int T = std::min(cfg.seq_len, (longest + kPadMultiple - 1) / kPadMultiple * kPadMultiple);
      std::vector<int32_t> in(static_cast<size_t>(B) * T, bos), tg(static_cast<size_t>(B) * T, bos);
      for (int b = 0; b < B; ++b) {
        const auto& r = ex->rows[b];
        for (size_t p = 0; p < r.size(); ++p) {
          in[b * T + p] = r[p];
          if (p + 1 < r.size()) tg[b * T + p] = r[p + 1];
        }
      }
      const GPT view = model.with_seq_len(T);
      PipelineEngine engine(const_cast<GPT&>(view), grid);
      auto fetch = [&](int, int32_t* inputs, int32_t* targets) {
        std::copy(in.begin(), in.end(), inputs);
        std::copy(tg.begin(), tg.end(), targets);
      };
      engine.forward_only(1, B, fetch, [&](const Activations& acts) {
        if (task.type == CoreTaskType::kLanguageModeling) {
          // Targets [start, end) are predicted at positions [start - 1, end - 1).
          const int s = std::max(ex->start[0], 1), e = ex->end[0];
          bool all = true;
          if (e > s) {
            const std::vector<int64_t> pred = argmax_rows(view, acts, s - 1, e - s);
            for (int p = s; p < e; ++p) all = all && pred[p - s] == ex->rows[0][p];
          }
          correct += all ? 1 : 0;
          return;
        }
        // The row with the lowest mean loss; the first one on ties (Python's min, then index).
        int pred = 0;
        double best = 0;
        for (int b = 0; b < B; ++b) {
          const int s = std::max(ex->start[b], 1), e = ex->end[b];
          double sum = 0;
          for (int p = s - 1; p < e - 1; ++p) sum += acts.token_loss[static_cast<size_t>(b) * T + p];
          const double mean = e > s ? sum / (e - s) : NAN;
          if (b == 0 || mean < best) best = mean, pred = b;
        }
        correct += pred == ex->gold ? 1 : 0;
      });
    }
    // Only the last stage counted; replicas counted different examples. An example that cannot
    // be built fails on every rank of its replica; the others learn it here.
    double sums[2] = {correct, st.ok() ? 0.0 : 1.0};
    grid.pp()->all_reduce_sum(sums, 2);
    grid.dp()->all_reduce_sum(sums, 2);
    if (!st.ok()) return st;
    if (sums[1] > 0)
      return absl::InternalError("CORE: an example failed on another data-parallel replica (its rank 0 says which)");
    CoreTaskResult r;
    r.label = task.label;
    r.examples = n;
    r.accuracy = n > 0 ? sums[0] / static_cast<double>(n) : 0.0;
    const double b = 0.01 * task.random_baseline;
    r.centered = (r.accuracy - b) / (1.0 - b);
    result.tasks.push_back(r);
    if (progress)
      progress(absl::StrFormat("core: %-28s %-17s %5d examples  accuracy %.4f  centered %+.4f  (%.1fs)",
                               task.label, core_task_type_name(task.type), n, r.accuracy, r.centered,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }
  double sum = 0;
  for (const CoreTaskResult& r : result.tasks) sum += r.centered;
  result.core = result.tasks.empty() ? 0.0 : sum / static_cast<double>(result.tasks.size());
  return result;
}

}  // namespace vt::eval
