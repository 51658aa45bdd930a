// train/diagnose.h: the metrics against cases whose answer is known (identical rows: cosine 1;
// orthonormal rows: 0; all-zero scores: uniform attention, entropy log(keys in the window)),
// against brute-force loops written as the ResFormer analyze/ scripts compute them, and the whole
// pass on a model built so that its answers are known (every token the same embedding: every
// layer's tokens identical, similarity 1; W_Q = 0: uniform attention) with the plain init as
// the control, and the V1 share of resformer-identity against 0.5 V1 / 0.5 V_l read directly.
#include "train/diagnose.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/rng.h"
#include "data/loader.h"
#include "data/prepare_options.h"
#include "data/shards.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "nlohmann/json.hpp"

namespace vt {
namespace {

namespace fs = std::filesystem;

std::vector<float> random_rows(int64_t T, int64_t C, uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(T * C);
  for (auto& v : x) v = static_cast<float>(r.normal(0.3, 1.0));
  return x;
}

TEST(DiagnoseMetrics, CosineKnownCases) {
  const int64_t T = 5, C = 8;
  std::vector<float> same(T * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) same[t * C + c] = (t + 1) * (c - 2.5f);  // same direction
  EXPECT_NEAR(mean_pairwise_cosine(same.data(), T, C), 1.0, 1e-12);
  std::vector<float> ortho(T * C, 0.0f);
  for (int64_t t = 0; t < T; ++t) ortho[t * C + t] = 2.0f + t;
  EXPECT_NEAR(mean_pairwise_cosine(ortho.data(), T, C), 0.0, 1e-12);
  const std::vector<float> opposite = {1, 2, -1, -2};
  EXPECT_NEAR(mean_pairwise_cosine(opposite.data(), 2, 2), -1.0, 1e-12);
}

TEST(DiagnoseMetrics, CosineMatchesThePairwiseMatrix) {
  // get_similarity.py: normalize rows, the T x T matrix of dot products, mean off the diagonal.
  const int64_t T = 13, C = 7;
  std::vector<float> x = random_rows(T, C, 3);
  for (int64_t c = 0; c < C; ++c) x[4 * C + c] = 0.0f;  // a zero row counts with cosine 0
  double sum = 0.0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      if (i == j) continue;
      double d = 0, ni = 0, nj = 0;
      for (int64_t c = 0; c < C; ++c) {
        d += double{x[i * C + c]} * x[j * C + c];
        ni += double{x[i * C + c]} * x[i * C + c];
        nj += double{x[j * C + c]} * x[j * C + c];
      }
      sum += d / std::max(std::sqrt(ni), 1e-12) / std::max(std::sqrt(nj), 1e-12);
    }
  EXPECT_NEAR(mean_pairwise_cosine(x.data(), T, C), sum / (T * (T - 1)), 1e-12);
}

TEST(DiagnoseMetrics, UniformAttentionHasEntropyLogKeys) {
  const int64_t T = 20, hd = 4, W = 6;
  std::vector<float> q(T * hd, 0.0f), k = random_rows(T, hd, 5);
  std::vector<double> imp(T, 0.0);
  const double h = head_attention_entropy(q.data(), hd, k.data(), hd, T, hd, W, 0.5, nullptr, imp.data());
  double want = 0.0;
  for (int64_t t = 0; t < T; ++t) want += std::log(static_cast<double>(std::min(t + 1, W)));
  EXPECT_NEAR(h, want, 1e-9);
  EXPECT_NEAR(h / T, uniform_attention_entropy(T, W), 1e-12);
  // Key s receives 1/min(t+1, W) from every query t in [s, s + W).
  for (int64_t s = 0; s < T; ++s) {
    double w = 0.0;
    for (int64_t t = s; t < std::min(T, s + W); ++t) w += 1.0 / static_cast<double>(std::min(t + 1, W));
    EXPECT_NEAR(imp[s], w, 1e-12) << s;
  }
  std::vector<double> flat(7, 2.5);
  EXPECT_NEAR(distribution_entropy(flat.data(), 7), std::log(7.0), 1e-12);
}

TEST(DiagnoseMetrics, EntropyMatchesASoftmaxWithBias) {
  // Brute force: per query, softmax over its window of scale q.k + bias, -sum p log p.
  const int64_t T = 9, hd = 3, W = 4, ld = 2 * hd;  // head 1 of two interleaved heads
  const std::vector<float> q = random_rows(T, ld, 8), k = random_rows(T, ld, 9), bias = random_rows(T, T, 10);
  const double scale = 0.7;
  std::vector<double> imp(T, 0.0);
  const double got = head_attention_entropy(q.data() + hd, ld, k.data() + hd, ld, T, hd, W, scale,
                                            bias.data(), imp.data());
  double want = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> e;
    double z = 0.0;
    for (int64_t s = std::max<int64_t>(0, t - W + 1); s <= t; ++s) {
      double d = 0.0;
      for (int64_t c = 0; c < hd; ++c) d += double{q[t * ld + hd + c]} * k[s * ld + hd + c];
      e.push_back(std::exp(scale * d + bias[t * T + s]));
      z += e.back();
    }
    for (double v : e) want -= v / z * std::log(v / z);
  }
  EXPECT_NEAR(got, want, 1e-9);
  double total = 0.0;
  for (double v : imp) total += v;
  EXPECT_NEAR(total, static_cast<double>(T), 1e-9);  // every query's row sums to 1
}

// A val split of random tokens (the model's vocabulary) in a fresh data directory.
fs::path make_val_dir(const std::string& name, int64_t vocab, int64_t tokens) {
  const fs::path d = fs::path(::testing::TempDir()) / ("vt_diagnose_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  Rng r(17);
  std::vector<int32_t> toks(tokens);
  for (auto& t : toks) t = static_cast<int32_t>(r.uniform() * vocab) % vocab;
  EXPECT_TRUE(data::write_shard((d / "val_00000.bin").string(), toks, vocab).ok());
  nlohmann::json meta = {{"format", "vtrain-data"},
                         {"created_by", "vtrain prepare"},
                         {"tokenizer", {{"vocab_size", vocab}}},
                         {"train", {{"tokens", 0}, {"shards", nlohmann::json::array()}}},
                         {"val", {{"tokens", tokens}, {"shards", {"val_00000.bin"}}}}};
  std::ofstream(d / data::kMetaFile) << meta.dump();
  return d;
}

struct Built {
  ModelConfig cfg;
  ParamStore store;
  std::unique_ptr<GPT> model;
  explicit Built(const ModelConfig& c) : cfg(c) {
    model = std::make_unique<GPT>(cfg);
    model->register_params(store);
    store.finalize();
    model->init_params(7);
  }
};

Diagnosis run(Built& b, const fs::path& dir, int64_t tokens) {
  ProcessGrid grid(self_communicator(), GridShape{1, 1, 1});
  PipelineEngine engine(*b.model, grid);
  auto d = diagnose(engine, grid, dir.string(), 2, tokens);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Diagnosis{};
}

TEST(Diagnose, IdenticalTokensAndZeroQueriesGiveKnownAnswers) {
  const ModelConfig cfg = testing::tiny_config(ValueMode::kBaseline);  // 6 layers, T 32, window 8
  const fs::path dir = make_val_dir("known", cfg.vocab_size, 4096);
  Built control(cfg);
  const Diagnosis c = run(control, dir, 4 * cfg.seq_len);
  Built b(cfg);
  Tensor wte = b.store.param("wte");
  const int64_t C = cfg.n_embd;
  for (int64_t r = 1; r < wte.dim(0); ++r)
    for (int64_t j = 0; j < C; ++j) wte.f32()[r * C + j] = wte.f32()[j];
  for (int i = 0; i < cfg.n_layer; ++i) b.store.param("blocks." + std::to_string(i) + ".attn.wq").zero_();
  b.store.refresh_compute_copy();
  const Diagnosis d = run(b, dir, 4 * cfg.seq_len);
  ASSERT_EQ(d.layers.size(), static_cast<size_t>(cfg.n_layer));
  EXPECT_EQ(d.sequences, 4);
  EXPECT_NEAR(d.embedding_similarity, 1.0, 1e-6);
  EXPECT_LT(c.embedding_similarity, 0.5);  // the control: distinct tokens
  double control_gap = 0.0;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerDiagnosis& r = d.layers[l];
    EXPECT_NEAR(r.similarity, 1.0, 1e-5) << l;
    EXPECT_LT(c.layers[l].similarity, 0.9) << l;
    EXPECT_EQ(r.window, std::min(cfg.layer_window(l), cfg.seq_len));
    ASSERT_EQ(r.head_entropy.size(), static_cast<size_t>(cfg.n_head));
    const double uniform = uniform_attention_entropy(cfg.seq_len, r.window);
    for (int h = 0; h < cfg.n_head; ++h) {
      EXPECT_NEAR(r.head_entropy[h], uniform, 1e-9) << l << " " << h;
      control_gap = std::max(control_gap, std::fabs(c.layers[l].head_entropy[h] - uniform));
    }
    EXPECT_FALSE(r.has_share);  // baseline: no V1 term
  }
  EXPECT_GT(control_gap, 1e-4);
}

TEST(Diagnose, ValueShareReadsTheModesCoefficients) {
  ModelConfig cfg = testing::tiny_config(ValueMode::kResformerIdentity);
  const fs::path dir = make_val_dir("share", cfg.vocab_size, 4096);
  Built b(cfg);
  const Diagnosis d = run(b, dir, 4 * cfg.seq_len);
  // v = 0.5 V1 + 0.5 V_l (docs/model.md): the share is ||V1|| / (||V1|| + ||V_l||), with the
  // context values read from a forward of the same rows.
  std::vector<double> v1(cfg.n_layer, 0.0), own(cfg.n_layer, 0.0);
  {
    ProcessGrid grid(self_communicator(), GridShape{1, 1, 1});
    PipelineEngine engine(*b.model, grid);
    data::LoaderOptions lo;
    lo.vocab_size = cfg.vocab_size;
    auto val = data::DataLoader::open(dir.string(), "val", lo);
    ASSERT_TRUE(val.ok());
    PassHooks hooks;
    hooks.block_state = [&](int l, const BlockActs& a, const Bundle& bundle, const Activations&) {
      for (float x : bundle.values[0].to_host_f32()) v1[l] += double{x} * x;
      for (float x : a.ctx_v.to_host_f32()) own[l] += double{x} * x;
    };
    engine.forward_only(2, 2, [&](int, int32_t* in, int32_t* tg) {
      ASSERT_TRUE(val->next_batch_into(2, cfg.seq_len, 0, 1, in, tg).ok());
    }, {}, hooks);
  }
  EXPECT_FALSE(d.layers[0].has_share);
  for (int l = 1; l < cfg.n_layer; ++l) {
    ASSERT_TRUE(d.layers[l].has_share) << l;
    const double want = std::sqrt(v1[l]) / (std::sqrt(v1[l]) + std::sqrt(own[l]));
    EXPECT_NEAR(d.layers[l].share(), want, 1e-6) << l;
    EXPECT_GT(std::fabs(want - 0.5), 1e-4) << "V1 and V_l must differ for the check to mean anything";
  }
  // svformer: v = V1 on every target, nothing of its own.
  Built s(testing::tiny_config(ValueMode::kSvformer));
  const Diagnosis ds = run(s, dir, 4 * cfg.seq_len);
  for (int l = 1; l < cfg.n_layer; ++l) {
    ASSERT_TRUE(ds.layers[l].has_share);
    EXPECT_EQ(ds.layers[l].own_norm, 0.0);
    EXPECT_EQ(ds.layers[l].share(), 1.0);
  }
}

}  // namespace
}  // namespace vt
