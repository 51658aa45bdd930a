// E-SPA / U-SPA attention biases (see attn_bias.h).
#include "model/attn_bias.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace vt {

namespace {

// U-SPA's Cholesky factor: L[j][j] = d_j, L[i][j] = c_j for i > j (compound symmetry).
void uspa_factor(double rho, int T, std::vector<double>& d, std::vector<double>& c) {
  d.assign(T, 1.0);
  c.assign(T, 0.0);
  double s = 0.0;  // sum_{k<j} c_k^2
  for (int j = 0; j < T; ++j) {
    d[j] = std::sqrt(std::max(1.0 - s, 0.0));
    c[j] = (rho - s) / d[j];
    s += c[j] * c[j];
  }
}

// E-SPA's Cholesky factor (an AR(1) kernel with neighbour correlation r):
// L[i][j] = r^(i-j) sigma_j, sigma_0 = 1, sigma_j = sqrt(1 - r^2); its inverse is bidiagonal,
// M[j][j] = 1 / sigma_j, M[j+1][j] = -r / sigma_{j+1}.
double espa_l(double r, int i, int j) {
  const double sigma = j == 0 ? 1.0 : std::sqrt(1.0 - r * r);
  return std::pow(r, i - j) * sigma;
}

}  // namespace

double spa_rho(int layer, int n_layer, const std::string& schedule) {
  if (layer < 0) return 0.0;
  const double frac = static_cast<double>(layer + 1) / static_cast<double>(n_layer);
  if (schedule == "simplest") {
    const double diag2 = std::pow(-std::expm1(-2.0 * kSimplestGammaL), frac);  // 1 - rho^2
    return std::sqrt(1.0 - diag2);
  }
  VT_CHECK_MSG(schedule == "ours", "unknown SPA schedule " << schedule);
  return kSpaRhoMax * frac;
}

std::vector<double> spa_attention_matrix(const std::string& kind, int layer, int n_layer, int T,
                                         const std::string& schedule) {
  const double rho = spa_rho(layer, n_layer, schedule);
  const double prev = spa_rho(layer - 1, n_layer, schedule);
  std::vector<double> A(static_cast<size_t>(T) * T, 0.0);
  if (kind == "uspa") {
    std::vector<double> d, c, dp, cp;
    uspa_factor(rho, T, d, c);
    uspa_factor(prev, T, dp, cp);
    // Row i of A solves x L_prev = L_cur[i, :] (x_j for j <= i), from j = i down.
    for (int i = 0; i < T; ++i) {
      double suffix = 0.0;  // sum_{k=j+1..i} x_k
      for (int j = i; j >= 0; --j) {
        const double lc = j == i ? d[i] : c[j];
        const double x = (lc - cp[j] * suffix) / dp[j];
        A[static_cast<size_t>(i) * T + j] = x;
        suffix += x;
      }
    }
  } else {
    VT_CHECK_MSG(kind == "espa", "unknown attention bias " << kind);
    const double sp = std::sqrt(1.0 - prev * prev);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j) {
        double a = espa_l(rho, i, j) / (j == 0 ? 1.0 : sp);
        if (j + 1 <= i) a += espa_l(rho, i, j + 1) * (-prev / sp);
        A[static_cast<size_t>(i) * T + j] = a;
      }
  }
  return A;
}

std::vector<float> spa_bias(const ModelConfig& cfg, int layer, int T) {
  const std::vector<double> A =
      spa_attention_matrix(cfg.attn_bias, layer, cfg.n_layer, T, cfg.spa_schedule);
  std::vector<float> B(A.size(), 0.0f);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j <= i; ++j) {
      const double a = A[static_cast<size_t>(i) * T + j];
      B[static_cast<size_t>(i) * T + j] =
          a > 0.0 ? static_cast<float>(std::log(a)) : -std::numeric_limits<float>::infinity();
    }
  return B;
}

std::vector<float> spa_rowscale(const ModelConfig& cfg, int layer, int T) {
  const std::vector<double> A =
      spa_attention_matrix(cfg.attn_bias, layer, cfg.n_layer, T, cfg.spa_schedule);
  const int W = std::min(cfg.layer_window(layer), T);
  std::vector<float> D(T, 0.0f);
  for (int i = 0; i < T; ++i) {
    double sum = 0.0;
    for (int j = std::max(0, i - W + 1); j <= i; ++j) sum += A[static_cast<size_t>(i) * T + j];
    D[i] = static_cast<float>(sum);
  }
  return D;
}

}  // namespace vt
