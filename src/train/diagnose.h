// `vtrain diagnose`: over-smoothing diagnostics of a checkpoint (docs/model.md "Over-smoothing
// diagnostics"), per layer on a prefix of the validation split, on any layout:
//   - the mean cosine similarity between the token representations of a sequence (the residual
//     stream after each block, and the embedding), over all ordered pairs of distinct positions,
//     averaged over sequences (the ResFormer repository's analyze/get_similarity.py);
//   - per head the mean over queries of the entropy of the query's attention distribution (over
//     the keys of its causal window), and per layer the entropy of the "token importance"
//     (attention summed over heads and queries, normalized) as analyze/get_entropy.py computes it;
//   - the share of the V1 / value-table / x0 signal in each target layer's value,
//     ||S|| / (||S|| + ||v - S||), S the value the mode computes with the layer's own context
//     value (and resformer-dense's other earlier values) set to zero.
// The pure metrics are exposed for tests; diagnose() reads them through GPT::PassHooks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "parallel/process_grid.h"
#include "pipeline/pipeline.h"

namespace vt {

// Mean of cos(x_i, x_j) over ordered pairs i != j of the T rows of x (T, C) row-major (a zero
// row has cosine 0 with everything, as torch's normalize makes it). T >= 2.
double mean_pairwise_cosine(const float* x, int64_t T, int64_t C);

// One head's softmax attention over one sequence: query t sees keys s with 0 <= t - s < window,
// scores scale * q_t . k_s (+ bias[t * T + s] when bias is given). Returns the sum over queries
// of each query's entropy (nats) and adds each key's total attention (over queries) to
// importance[s] (T entries). q rows are ldq floats apart, k rows ldk.
double head_attention_entropy(const float* q, int64_t ldq, const float* k, int64_t ldk, int64_t T,
                              int64_t hd, int64_t window, double scale, const float* bias,
                              double* importance);

// Entropy (nats) of the distribution w / sum(w) (w >= 0, sum > 0); zero entries add nothing.
double distribution_entropy(const double* w, int64_t n);

// Mean over queries t < T of log(min(t + 1, window)): the entropy of uniform attention.
double uniform_attention_entropy(int64_t T, int64_t window);

struct LayerDiagnosis {
  int window = 0;
  double similarity = 0.0;
  std::vector<double> head_entropy;  // [head], mean over queries
  double importance_entropy = 0.0;   // get_entropy.py's, mean over sequences
  bool has_share = false;            // a target layer whose value mixes V1 / a table / x0
  double shared_norm = 0.0, own_norm = 0.0;  // ||S||, ||v - S|| over all evaluated tokens
  double share() const { return shared_norm / (shared_norm + own_norm); }
};

struct Diagnosis {
  std::string value_mode;
  int64_t sequences = 0, seq_len = 0;
  double embedding_similarity = 0.0;
  double uniform_entropy_full = 0.0;  // log keys under uniform causal attention, full window
  std::vector<LayerDiagnosis> layers;
};

// Collective (every rank calls it; every rank gets the result): forward passes over up to
// `max_tokens` tokens of the `val` split of `data_dir` (whole global batches of micro_batch x dp
// rows, as evaluate() reads them), with the metrics summed over the ranks that hold each layer
// and head.
absl::StatusOr<Diagnosis> diagnose(PipelineEngine& engine, const ProcessGrid& grid,
                                   const std::string& data_dir, int micro_batch,
                                   int64_t max_tokens);

nlohmann::json diagnosis_json(const Diagnosis& d);
// The per-layer table printed by `vtrain diagnose` (one line per layer, heads' entropies last).
std::string diagnosis_table(const Diagnosis& d);

}  // namespace vt
