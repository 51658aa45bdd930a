// Over-smoothing diagnostics (train/diagnose.h): the metrics, and the pass that reads them from
// the model's forward through PassHooks.
#include "train/diagnose.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "train/preflight.h"

namespace vt {

double mean_pairwise_cosine(const float* x, int64_t T, int64_t C) {
  // sum_{i != j} u_i . u_j = ||sum_i u_i||^2 - sum_i ||u_i||^2 with u_i = x_i / ||x_i||.
  std::vector<double> s(C, 0.0);
  double self = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x + t * C;
    double n2 = 0.0;
    for (int64_t c = 0; c < C; ++c) n2 += static_cast<double>(r[c]) * r[c];
    if (n2 <= 0.0) continue;
    const double inv = 1.0 / std::sqrt(n2);
    for (int64_t c = 0; c < C; ++c) s[c] += r[c] * inv;
    self += n2 * inv * inv;
  }
  double tot = 0.0;
  for (double v : s) tot += v * v;
  return (tot - self) / (static_cast<double>(T) * (T - 1));
}

double head_attention_entropy(const float* q, int64_t ldq, const float* k, int64_t ldk, int64_t T,
                              int64_t hd, int64_t window, double scale, const float* bias,
                              double* importance) {
  const int64_t W = std::min(window, T);
  std::vector<double> p(W);
  double total = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t lo = std::max<int64_t>(0, t - W + 1), n = t - lo + 1;
    const float* qt = q + t * ldq;
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float* ks = k + (lo + j) * ldk;
      double d = 0.0;
      for (int64_t c = 0; c < hd; ++c) d += static_cast<double>(qt[c]) * ks[c];
      p[j] = scale * d + (bias ? bias[t * T + lo + j] : 0.0);
      mx = std::max(mx, p[j]);
    }
    double z = 0.0;
    for (int64_t j = 0; j < n; ++j) z += (p[j] = std::exp(p[j] - mx));
    double h = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double pj = p[j] / z;
      if (pj > 0.0) h -= pj * std::log(pj);
      importance[lo + j] += pj;
    }
    total += h;
  }
  return total;
}

double distribution_entropy(const double* w, int64_t n) {
  double z = 0.0;
  for (int64_t i = 0; i < n; ++i) z += w[i];
  double h = 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (w[i] > 0.0) h -= (w[i] / z) * std::log(w[i] / z);
  return h;
}

double uniform_attention_entropy(int64_t T, int64_t window) {
  double s = 0.0;
  for (int64_t t = 0; t < T; ++t) s += std::log(static_cast<double>(std::min(t + 1, window)));
  return s / static_cast<double>(T);
}

namespace {

// A target layer whose value mixes V1, a value table or x0 (NeuTRENO's V1 acts on the attention
// output, not on v: none).
bool mixes_shared_signal(const ModelConfig& cfg, int layer) {
  const ValuePath& vp = cfg.value();
  return cfg.is_target(layer) && (vp.reads_v1() || vp.has_table() || vp.context_from_x0()) &&
         vp.attention_output_v1_coef(cfg) == 0.0f;
}

double sum_squares(const std::vector<float>& a) {
  double s = 0.0;
  for (float v : a) s += static_cast<double>(v) * v;
  return s;
}

}  // namespace

absl::StatusOr<Diagnosis> diagnose(PipelineEngine& engine, const ProcessGrid& grid,
                                   const std::string& data_dir, int micro_batch,
                                   int64_t max_tokens) {
  const GPT& model = engine.model();
  const ModelConfig& cfg = model.config();
  data::LoaderOptions lo;
  lo.vocab_size = cfg.vocab_size;
  auto val_or = data::DataLoader::open(data_dir, "val", lo);
  if (!val_or.ok()) return agreed(val_or.status());
  data::DataLoader val = std::move(*val_or);
  const int64_t T = cfg.seq_len, dp = grid.shape().dp;
  if (T < 2) return agreed(absl::InvalidArgumentError("diagnose needs sequences of >= 2 tokens"));
  const int64_t rows_per_micro = static_cast<int64_t>(micro_batch) * dp;
  auto micro_or = eval_micro_batches(data_dir, val.tokens_per_epoch(), T, micro_batch,
                                     static_cast<int>(dp), max_tokens, "--tokens");
  if (!micro_or.ok()) return agreed(micro_or.status());
  const int micro = *micro_or;

  const int L = cfg.n_layer, H = cfg.n_head, hd = cfg.head_dim;
  const int Hl = model.local_heads(), Hkvl = model.local_kv_heads(), group = Hl / Hkvl;
  const int tp_rank = grid.coords().tp, head0 = tp_rank * Hl;
  const int64_t K = static_cast<int64_t>(Hkvl) * hd;
  // Sums over this rank's share, reduced over tp, pp and dp at the end:
  // [sim: L + 1 (embedding first)] [entropy: L * H] [importance entropy: L] [||S||^2, ||v-S||^2: 2L]
  const int64_t o_sim = 0, o_ent = L + 1, o_imp = o_ent + int64_t{L} * H, o_share = o_imp + L;
  std::vector<double> sums(o_share + 2 * L, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  PassHooks hooks;
  hooks.block_output = [&](int layer, const Tensor& x) {
    if (tp_rank != 0) return;  // the stream is replicated over tensor-parallel ranks
    const std::vector<float> h = x.to_host_f32();
    const int64_t C = x.dim(-1), B = x.numel() / (T * C);
    for (int64_t b = 0; b < B; ++b) sums[o_sim + layer + 1] += mean_pairwise_cosine(h.data() + b * T * C, T, C);
  };
  hooks.block_state = [&](int layer, const BlockActs& a, const Bundle& bundle, const Activations& acts) {
    const int64_t B = acts.B;
    const std::vector<float> q = a.qn.to_host_f32(), k = a.kn.to_host_f32();
    const Tensor& bias_t = model.attention_bias(layer);
    const std::vector<float> bias = bias_t.defined() ? bias_t.to_host_f32() : std::vector<float>();
    const int64_t window = cfg.layer_window(layer), ldq = int64_t{Hl} * hd;
    std::vector<double> imp(B * T, 0.0), ent(B * Hl, 0.0);
    // Sequences in parallel (each writes its own rows); summed below in a fixed order.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < B; ++b)
      for (int h = 0; h < Hl; ++h)
        ent[b * Hl + h] = head_attention_entropy(
            q.data() + b * T * ldq + int64_t{h} * hd, ldq, k.data() + b * T * K + int64_t{h / group} * hd, K,
            T, hd, window, scale, bias.empty() ? nullptr : bias.data(), imp.data() + b * T);
    for (int64_t b = 0; b < B; ++b)
      for (int h = 0; h < Hl; ++h) sums[o_ent + int64_t{layer} * H + head0 + h] += ent[b * Hl + h];
    // get_entropy.py's importance: attention summed over every head (all tensor-parallel ranks).
    model.parallel().tp_comm()->all_reduce_sum(imp.data(), static_cast<int64_t>(imp.size()));
    if (tp_rank == 0)
      for (int64_t b = 0; b < B; ++b) sums[o_imp + layer] += distribution_entropy(imp.data() + b * T, T);

    if (!mixes_shared_signal(cfg, layer)) return;
    // S: the mode's own forward with the layer's own context value (and resformer-dense's later
    // earlier values) zeroed; v - S is the rest. Every mode is linear in these sources.
    const ValuePath& vp = cfg.value();
    ValueSources src = gather_value_sources(vp, layer, K, a.attn_in, a.ctx_v, bundle.values);
    auto zeros_like = [](const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype(), t.device()); };
    if (src.ctx.defined() && !vp.context_from_x0()) src.ctx = zeros_like(src.ctx);
    for (size_t j = 1; j < src.values.size(); ++j)
      if (src.values[j].defined()) src.values[j] = zeros_like(src.values[j]);
    const int64_t N = B * T;
    Tensor s = Tensor::zeros({N, K}, a.v.dtype(), a.v.device());
    ValueState st;
    std::vector<double> dcoef(acts.value_coef.size(), 0.0);
    vp.forward(model.value_ctx(layer, N, acts.input_ids, &acts.value_coef, &dcoef, acts.table_ids),
               src, st, s);
    std::vector<float> sh = s.to_host_f32(), v = a.v.to_host_f32();
    for (size_t i = 0; i < v.size(); ++i) v[i] -= sh[i];
    sums[o_share + 2 * layer] += sum_squares(sh);
    sums[o_share + 2 * layer + 1] += sum_squares(v);
  };

  auto fetch = [&](int, int32_t* in, int32_t* tg) {
    absl::Status st = val.next_batch_into(rows_per_micro, T, grid.coords().dp, dp, in, tg);
    if (!st.ok()) abort_job(std::string(st.message()));
  };
  engine.forward_only(micro, micro_batch, fetch, {}, hooks);
  const int64_t n = static_cast<int64_t>(sums.size());
  grid.tp()->all_reduce_sum(sums.data(), n);
  grid.pp()->all_reduce_sum(sums.data(), n);
  grid.dp()->all_reduce_sum(sums.data(), n);

  Diagnosis d;
  d.value_mode = cfg.value().name();
  d.seq_len = T;
  d.sequences = static_cast<int64_t>(micro) * rows_per_micro;
  const double seqs = static_cast<double>(d.sequences);
  d.embedding_similarity = sums[o_sim] / seqs;
  d.uniform_entropy_full = uniform_attention_entropy(T, T);
  d.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    LayerDiagnosis& r = d.layers[l];
    r.window = static_cast<int>(std::min<int64_t>(cfg.layer_window(l), T));
    r.similarity = sums[o_sim + l + 1] / seqs;
    for (int h = 0; h < H; ++h) r.head_entropy.push_back(sums[o_ent + int64_t{l} * H + h] / (seqs * T));
    r.importance_entropy = sums[o_imp + l] / seqs;
    r.has_share = mixes_shared_signal(cfg, l);
    r.shared_norm = std::sqrt(sums[o_share + 2 * l]);
    r.own_norm = std::sqrt(sums[o_share + 2 * l + 1]);
  }
  return d;
}

nlohmann::json diagnosis_json(const Diagnosis& d) {
  nlohmann::json j;
  j["value_mode"] = d.value_mode;
  j["sequences"] = d.sequences;
  j["seq_len"] = d.seq_len;
  j["tokens"] = d.sequences * d.seq_len;
  j["embedding_similarity"] = d.embedding_similarity;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const LayerDiagnosis& r = d.layers[l];
    double mean = 0.0;
    for (double e : r.head_entropy) mean += e;
    mean /= static_cast<double>(r.head_entropy.size());
    nlohmann::json row = {{"layer", l},
                          {"window", r.window},
                          {"similarity", r.similarity},
                          {"head_entropy", r.head_entropy},
                          {"entropy_mean", mean},
                          {"uniform_entropy", uniform_attention_entropy(d.seq_len, r.window)},
                          {"importance_entropy", r.importance_entropy}};
    if (r.has_share) {
      row["v1_share"] = r.share();
      row["shared_norm"] = r.shared_norm;
      row["own_norm"] = r.own_norm;
    } else {
      row["v1_share"] = nullptr;
    }
    layers.push_back(std::move(row));
  }
  j["layers"] = std::move(layers);
  return j;
}

std::string diagnosis_table(const Diagnosis& d) {
  std::string out = absl::StrFormat(
      "%-5s %6s %10s %9s %9s %10s %8s  %s\n", "layer", "window", "similarity", "entropy",
      "uniform", "importance", "v1_share", "entropy per head");
  out += absl::StrFormat("%-5s %6s %10.4f\n", "emb", "-", d.embedding_similarity);
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const LayerDiagnosis& r = d.layers[l];
    double mean = 0.0;
    std::string heads;
    for (double e : r.head_entropy) {
      mean += e;
      absl::StrAppend(&heads, absl::StrFormat(" %.3f", e));
    }
    mean /= static_cast<double>(r.head_entropy.size());
    const std::string share = r.has_share ? absl::StrFormat("%.4f", r.share()) : "-";
    out += absl::StrFormat("%-5d %6d %10.4f %9.4f %9.4f %10.4f %8s %s\n", static_cast<int>(l),
                           r.window, r.similarity, mean,
                           uniform_attention_entropy(d.seq_len, r.window), r.importance_entropy,
                           share, heads);
  }
  return out;
}

}  // namespace vt
