// Parameter initialization rules (see init.h).
#include "model/init.h"

#include <cmath>

#include "core/check.h"
#include "core/rng.h"

namespace vt {

std::vector<float> uniform_init(uint64_t seed, const std::string& name, int64_t n, double lo,
                                double hi) {
  Rng rng = Rng::for_name(seed, name);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(rng.uniform(lo, hi));
  return out;
}

std::vector<float> normal_init(uint64_t seed, const std::string& name, int64_t n, double stddev) {
  Rng rng = Rng::for_name(seed, name);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(rng.normal(0.0, stddev));
  return out;
}

std::vector<float> orthogonal_init(uint64_t seed, const std::string& name, int64_t rows,
                                   int64_t cols) {
  const std::vector<float> g = normal_init(seed, name, rows * cols, 1.0);
  // Vectors to orthonormalize: the rows, or (tall matrices) the columns, as contiguous arrays.
  const bool by_rows = rows <= cols;
  const int64_t nv = by_rows ? rows : cols, len = by_rows ? cols : rows;
  std::vector<double> q(nv * len);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      q[by_rows ? r * cols + c : c * rows + r] = g[r * cols + c];
  for (int64_t i = 0; i < nv; ++i) {
    double* qi = q.data() + i * len;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t j = 0; j < i; ++j) {
        const double* qj = q.data() + j * len;
        double dot = 0.0;
        for (int64_t c = 0; c < len; ++c) dot += qi[c] * qj[c];
        for (int64_t c = 0; c < len; ++c) qi[c] -= dot * qj[c];
      }
    double norm = 0.0;
    for (int64_t c = 0; c < len; ++c) norm += qi[c] * qi[c];
    norm = std::sqrt(norm);
    for (int64_t c = 0; c < len; ++c) qi[c] /= norm;
  }
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = static_cast<float>(q[by_rows ? r * cols + c : c * rows + r]);
  return out;
}

std::vector<float> generate_init(const InitRule& rule, const std::string& name, int64_t n,
                                 uint64_t seed) {
  std::vector<float> out;
  switch (rule.kind) {
    case InitRule::Kind::kZeros: out.assign(n, 0.0f); break;
    case InitRule::Kind::kConstant: out.assign(n, static_cast<float>(rule.a)); break;
    case InitRule::Kind::kUniform: out = uniform_init(seed, name, n, rule.a, rule.b); break;
    case InitRule::Kind::kNormal: out = normal_init(seed, name, n, rule.a); break;
    case InitRule::Kind::kCustom: out = rule.custom(seed); break;
  }
  VT_CHECK_MSG(static_cast<int64_t>(out.size()) == n,
               "init of " << name << " made " << out.size() << " values, expected " << n);
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
