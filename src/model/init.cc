// MODEL.md initialization rules, per parameter name.
#include "model/init.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/rng.h"

namespace vt {

namespace {

std::vector<float> uniform(uint64_t seed, const std::string& name, int64_t n, double lo,
                           double hi) {
  Rng rng = Rng::for_name(seed, name);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(rng.uniform(lo, hi));
  return out;
}

std::vector<float> normal(uint64_t seed, const std::string& name, int64_t n, double std) {
  Rng rng = Rng::for_name(seed, name);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(rng.normal(0.0, std));
  return out;
}

double matrix_bound(const ModelConfig& cfg) { return std::sqrt(3.0 / cfg.n_embd); }

std::vector<float> wte_init(const ModelConfig& cfg, uint64_t seed) {
  return normal(seed, "wte", static_cast<int64_t>(cfg.vocab_padded) * cfg.n_embd, 0.8);
}

std::vector<float> wv_init(const ModelConfig& cfg, uint64_t seed, int layer) {
  const double s = matrix_bound(cfg);
  return uniform(seed, "blocks." + std::to_string(layer) + ".attn.wv",
                 static_cast<int64_t>(cfg.n_embd) * cfg.kv_dim(), -s, s);
}

// E = norm(wte_init) W_V^layer_init: the first forward pass equals x0v with gain 1.
std::vector<float> aligned_table(const ModelConfig& cfg, uint64_t seed, int layer) {
  const int64_t Vp = cfg.vocab_padded, C = cfg.n_embd, K = cfg.kv_dim();
  std::vector<float> wte = wte_init(cfg, seed);
  std::vector<float> rstd(Vp);
  cpu::rmsnorm_forward<float>(wte.data(), wte.data(), rstd.data(), Vp, C, 1.0f, cfg.norm_eps);
  std::vector<float> wv = wv_init(cfg, seed, layer);
  std::vector<float> table(Vp * K);
  cpu::gemm<float>(false, false, Vp, K, C, 1.0f, wte.data(), C, wv.data(), K, 0.0f, table.data(),
                   K);
  return table;
}

int layer_of(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int layer = -1;
  if (parts.size() >= 2 && parts[0] == "blocks") VT_CHECK(absl::SimpleAtoi(parts[1], &layer));
  return layer;
}

}  // namespace

std::vector<float> init_global_param(const ModelConfig& cfg, const std::string& name,
                                     const Shape& global_shape, uint64_t seed) {
  const int64_t n = shape_numel(global_shape);
  const double s = matrix_bound(cfg);
  const int layer = layer_of(name);
  std::vector<float> out;
  if (name == "wte") {
    out = wte_init(cfg, seed);
  } else if (name == "lm_head") {
    out = normal(seed, name, n, 0.001);
  } else if (absl::EndsWith(name, ".attn.wq") || absl::EndsWith(name, ".attn.wk")) {
    out = uniform(seed, name, n, -s, s);
  } else if (absl::EndsWith(name, ".attn.wv")) {
    out = wv_init(cfg, seed, layer);
  } else if (absl::EndsWith(name, ".attn.wo") || absl::EndsWith(name, ".mlp.proj")) {
    out.assign(n, 0.0f);
  } else if (absl::EndsWith(name, ".mlp.fc")) {
    out = uniform(seed, name, n, -0.4 * s, 0.4 * s);
  } else if (absl::EndsWith(name, ".value.lambda1") || absl::EndsWith(name, ".value.lambda2")) {
    out.assign(n, 0.5f);
  } else if (absl::EndsWith(name, ".value.gain") || absl::EndsWith(name, ".value.a")) {
    out.assign(n, 1.0f);
  } else if (absl::EndsWith(name, ".value.b")) {
    out.assign(n, 0.0f);
  } else if (absl::EndsWith(name, ".value.dense")) {
    out.assign(n, static_cast<float>(1.0 / layer));
    out.back() = 1.0f;
  } else if (absl::EndsWith(name, ".value.gate_w")) {
    out = uniform(seed, name, n, 0.0, 0.02);
  } else if (name == "value_plus.logits") {
    out = normal(seed, name, n, 0.1);
  } else if (absl::EndsWith(name, "value.table")) {
    if (cfg.value_mode == ValueMode::kValueEmbed) {
      out = uniform(seed, name, n, -s, s);
    } else {
      const int aligned_layer = layer >= 0 ? layer : cfg.target_layers.front();
      out = aligned_table(cfg, seed, aligned_layer);
    }
  } else {
    VT_CHECK_MSG(false, "no init rule for parameter " << name);
  }
  VT_CHECK_MSG(static_cast<int64_t>(out.size()) == n, "init size mismatch for " << name);
  return out;
}

void copy_local_slice(const std::vector<float>& global, const ParamInfo& info, float* local) {
  const Shape& gs = info.global_shape;
  if (info.split.axis < 0) {
    std::copy(global.begin(), global.end(), local);
    return;
  }
  // outer x axis x inner decomposition.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < info.split.axis; ++d) outer *= gs[d];
  for (size_t d = info.split.axis + 1; d < gs.size(); ++d) inner *= gs[d];
  const int64_t g_axis = gs[info.split.axis], l_axis = info.shape[info.split.axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < l_axis; ++a) {
      const float* src = global.data() + (o * g_axis + info.split.offset + a) * inner;
      std::copy(src, src + inner, local + (o * l_axis + a) * inner);
    }
}

}  // namespace vt
