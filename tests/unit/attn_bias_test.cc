// E-SPA / U-SPA attention biases (src/model/attn_bias.cc) against docs/model.md "Block shapes":
// the depth schedule and a few entries of A_l worked out by hand from the documented formulas,
// then the construction's defining property A_l Sigma_{l-1} A_l^T = Sigma_l with the kernels
// written out here, B_l = log A_l, the bias of a shorter sequence being the leading block, and the
// rowscale D_l (--spa-rescale) turning softmax(B_l) back into A_l under each window.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/attn_bias.h"
#include "model/config.h"

namespace vt {
namespace {

// Sigma(rho) of docs/model.md, written independently of attn_bias.cc.
std::vector<double> kernel(const std::string& kind, double rho, int T) {
  std::vector<double> S(static_cast<size_t>(T) * T);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j)
      S[i * T + j] = i == j ? 1.0 : kind == "uspa" ? rho : std::pow(rho, std::abs(i - j));
  return S;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(SpaAttnBias, ScheduleMatchesTheDocumentedFormulaByHand) {
  // rho_l = 0.8 (l+1)/L, rho_{-1} = 0 (docs/model.md "Block shapes", --attn-bias).
  EXPECT_EQ(spa_rho(-1, 4), 0.0);
  EXPECT_NEAR(spa_rho(0, 4), 0.2, 1e-15);
  EXPECT_NEAR(spa_rho(1, 4), 0.4, 1e-15);
  EXPECT_NEAR(spa_rho(3, 4), 0.8, 1e-15);
  EXPECT_NEAR(spa_rho(5, 12), 0.4, 1e-15);
  EXPECT_NEAR(spa_rho(11, 12), 0.8, 1e-15);
  EXPECT_NEAR(spa_rho(0, 32), 0.025, 1e-15);
}

// --spa-schedule simplest (SimplEsT-ViT's E-SPA rule, docs/model.md): the last layer's neighbour
// correlation is exp(-gamma_L) = exp(-0.005), and every layer's A_l has the same diagonal beyond
// position 0, (1 - exp(-0.01))^(1/(2L)); each layer still maps Sigma_{l-1} to Sigma_l.
TEST(SpaAttnBias, SimplestScheduleHasAConstantDiagonal) {
  const int L = 6, T = 12;
  EXPECT_NEAR(spa_rho(L - 1, L, "simplest"), std::exp(-0.005), 1e-12);
  EXPECT_EQ(spa_rho(-1, L, "simplest"), 0.0);
  const double diag = std::pow(1.0 - std::exp(-0.01), 1.0 / (2 * L));
  double prev = 0.0;
  for (int l = 0; l < L; ++l) {
    SCOPED_TRACE(l);
    const double rho = spa_rho(l, L, "simplest");
    EXPECT_GT(rho, prev);  // the correlation grows with depth
    prev = rho;
    const std::vector<double> A = spa_attention_matrix("espa", l, L, T, "simplest");
    for (int i = 1; i < T; ++i) EXPECT_NEAR(A[i * T + i], diag, 1e-12) << i;
    // A Sigma_{l-1} A^T = Sigma_l.
    const std::vector<double> Sp = kernel("espa", spa_rho(l - 1, L, "simplest"), T);
    const std::vector<double> S = kernel("espa", rho, T);
    std::vector<double> got(T * T, 0.0);
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j)
        for (int a = 0; a < T; ++a)
          for (int b = 0; b < T; ++b) got[i * T + j] += A[i * T + a] * Sp[a * T + b] * A[j * T + b];
    EXPECT_LT(max_abs_diff(got, S), 1e-9);
  }
  // The default schedule is unchanged.
  EXPECT_DOUBLE_EQ(spa_rho(2, 4), 0.8 * 3 / 4);
  EXPECT_DOUBLE_EQ(spa_rho(2, 4, "ours"), 0.8 * 3 / 4);
}

TEST(SpaAttnBias, EntriesOfASmallMatrixByHand) {
  // Layer 1 of 4: rho = 0.4, previous rho = 0.2; s(x) = sqrt(1 - x^2).
  // E-SPA (AR(1) kernels): A[i][i] = s(.4)/s(.2) for i >= 1, A[i][0] = .4^(i-1) (.4 - .2 s(.4)/s(.2)),
  // A[i][j] = .4^(i-j-1) (s(.4)/s(.2)) (.4 - .2) for 1 <= j < i.
  const std::vector<double> espa = spa_attention_matrix("espa", 1, 4, 3);
  const std::vector<double> espa_hand = {1.0,            0.0,            0.0,
                                         0.212917130661, 0.935414346693, 0.0,
                                         0.085166852265, 0.187082869339, 0.935414346693};
  EXPECT_LT(max_abs_diff(espa, espa_hand), 1e-11);
  // U-SPA: rows 0 and 1 equal E-SPA's (the two kernels agree for T = 2); row 2 solves
  // x L_{0.2} = (0.4, c1, d2) with c1 = .4 (1 - .4)/s(.4), d2 = sqrt(1 - .4^2 - c1^2).
  const std::vector<double> uspa = spa_attention_matrix("uspa", 1, 4, 3);
  const std::vector<double> uspa_hand = {1.0,            0.0,            0.0,
                                         0.212917130661, 0.935414346693, 0.0,
                                         0.195024869935, 0.115738360230, 0.909137290097};
  EXPECT_LT(max_abs_diff(uspa, uspa_hand), 1e-11);
  // Layer 0 starts from Sigma_{-1} = I: A_0 is L_0 itself, the Cholesky factor of Sigma(0.2).
  const std::vector<double> first = spa_attention_matrix("espa", 0, 4, 2);
  EXPECT_LT(max_abs_diff(first, {1.0, 0.0, 0.2, std::sqrt(0.96)}), 1e-14);
}

TEST(SpaAttnBias, EachLayerTakesTheKernelOfThePreviousToItsOwn) {
  const int L = 4, T = 16;
  for (const std::string kind : {"espa", "uspa"}) {
    std::vector<double> prev(static_cast<size_t>(T) * T, 0.0);
    for (int i = 0; i < T; ++i) prev[i * T + i] = 1.0;
    for (int l = 0; l < L; ++l) {
      const std::vector<double> A = spa_attention_matrix(kind, l, L, T);
      std::vector<double> got(static_cast<size_t>(T) * T, 0.0);  // A prev A^T
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          double s = 0.0;
          for (int a = 0; a <= i; ++a)
            for (int b = 0; b <= j; ++b) s += A[i * T + a] * prev[a * T + b] * A[j * T + b];
          got[i * T + j] = s;
        }
      const std::vector<double> want = kernel(kind, 0.8 * (l + 1) / L, T);
      EXPECT_LT(max_abs_diff(got, want), 1e-12) << kind << " layer " << l;
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          if (j > i) EXPECT_EQ(A[i * T + j], 0.0) << kind;  // causal
          else EXPECT_GT(A[i * T + j], 0.0) << kind << " layer " << l << " [" << i << "][" << j << "]";
        }
      prev = want;
    }
  }
}

TEST(SpaAttnBias, BiasIsLogAAndAShorterSequenceGetsTheLeadingBlock) {
  for (const std::string kind : {"espa", "uspa"}) {
    ModelConfig c;
    c.n_layer = 3;
    c.attn_bias = kind;
    const int T = 12, Ts = 5;
    for (int l = 0; l < c.n_layer; ++l) {
      const std::vector<double> A = spa_attention_matrix(kind, l, c.n_layer, T);
      const std::vector<float> B = spa_bias(c, l, T), Bs = spa_bias(c, l, Ts);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          if (j > i) {
            EXPECT_EQ(B[i * T + j], 0.0f);  // above the diagonal: masked by causality, not here
            continue;
          }
          EXPECT_NEAR(B[i * T + j], std::log(A[i * T + j]), 1e-6) << kind;
          if (i < Ts) EXPECT_EQ(Bs[i * Ts + j], B[i * T + j]) << kind << " layer " << l;
        }
    }
  }
}

// The location-dependent rescaling: D_l[t] is A_l's row t summed over the keys the layer's window
// shows, so that D_l[t] softmax(B_l)[t] is A_l[t] itself on those keys (the layer applies A_l).
TEST(SpaAttnBias, RowscaleTimesSoftmaxOfTheBiasIsA) {
  for (const std::string kind : {"espa", "uspa"})
    for (const char* pattern : {"L", "SL"}) {
      ModelConfig c;
      c.n_layer = 3;
      c.seq_len = 12;
      c.window_pattern = pattern;
      c.short_window = 5;
      c.attn_bias = kind;
      const int T = c.seq_len;
      for (int l = 0; l < c.n_layer; ++l) {
        const std::vector<double> A = spa_attention_matrix(kind, l, c.n_layer, T);
        const std::vector<float> B = spa_bias(c, l, T), D = spa_rowscale(c, l, T);
        const int W = c.layer_window(l);
        for (int i = 0; i < T; ++i) {
          const int j0 = std::max(0, i - W + 1);
          double z = 0.0, row = 0.0;
          for (int j = j0; j <= i; ++j) z += std::exp(double(B[i * T + j])), row += A[i * T + j];
          EXPECT_NEAR(D[i], row, 1e-6 * row) << kind << " " << pattern << " layer " << l;
          for (int j = j0; j <= i; ++j)
            EXPECT_NEAR(D[i] * std::exp(double(B[i * T + j])) / z, A[i * T + j], 1e-5)
                << kind << " " << pattern << " layer " << l << " [" << i << "][" << j << "]";
        }
      }
    }
}

}  // namespace
}  // namespace vt
