// The fixed attention-logit biases of --attn-bias espa|uspa (docs/model.md, "Block shapes";
// He et al. 2023, "Deep Transformers without Shortcuts"). Layer l's bias is B_l = log A_l on the
// causal triangle, A_l = L_l L_{l-1}^{-1} with L_l the Cholesky factor of the target kernel
// Sigma_l, so that with W_Q = 0 the softmax matrix is A_l up to a per-row scale (which the
// next pre-norm removes). Sigma_{-1} = I (the embedding's positions start uncorrelated);
//   uspa: Sigma_l = (1 - rho_l) I + rho_l 1 1^T
//   espa: Sigma_l[i][j] = exp(-gamma_l |i - j|) with exp(-gamma_l) = rho_l
// and the depth schedule rho_l = kSpaRhoMax * (l + 1) / L, which is ours: the paper's own
// schedule could not be read (docs/model.md records what was and was not checked); or, with
// --spa-schedule simplest, SimplEsT-ViT's E-SPA schedule (spa_rho). With --spa-rescale on, the
// location-dependent rescaling (the paper's, per its abstract; SimplEsT-ViT's `d`): position t's
// output is multiplied by D_l[t], the sum of A_l's row t over the keys the layer's window shows,
// so that the layer applies A_l itself. Both Cholesky factors and the products are formed in
// closed form, O(T^2) per layer.
#pragma once
#include <vector>

#include "model/config.h"

namespace vt {

constexpr double kSpaRhoMax = 0.8;

// SimplEsT-ViT's final-layer E-SPA decay gamma_L (--spa-schedule simplest).
constexpr double kSimplestGammaL = 0.005;

// rho_l of layer l (0-based) of n_layer layers; rho_{-1} = 0. schedule "ours":
// rho_l = kSpaRhoMax (l+1)/L; "simplest" (SimplEsT-ViT's E-SPA rule, its layers numbered 1..L):
// 1 - rho_l^2 = (1 - exp(-2 gamma_L))^((l+1)/L), rho_l = exp(-gamma_l), so that every A_l has
// the same diagonal beyond position 0.
double spa_rho(int layer, int n_layer, const std::string& schedule = "ours");
// A_l (T x T, row-major [query][key], zero above the diagonal) in double.
std::vector<double> spa_attention_matrix(const std::string& kind, int layer, int n_layer, int T,
                                         const std::string& schedule = "ours");
// B_l = log A_l on the causal triangle (-inf where A_l is 0), 0 above it; f32.
std::vector<float> spa_bias(const ModelConfig& cfg, int layer, int T);
// D_l[t] = sum of A_l[t][s] over the keys s in [max(0, t - W + 1), t] of the layer's window W
// (T,); f32 (summed in double).
std::vector<float> spa_rowscale(const ModelConfig& cfg, int layer, int T);

}  // namespace vt
