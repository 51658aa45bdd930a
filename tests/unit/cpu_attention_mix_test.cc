// The CPU attention additions of the block shapes and NeuTRENO (docs/model.md): a fixed logit
// bias inside the softmax kernel, and the shaped-attention / NeuTRENO mix
//   out = D (beta*softmax_out - gamma*C v) + alpha*v + lam*(v1 - v)
// beside it (running window sums), with the E-SPA/U-SPA rowscale D and the centring term on the
// bias (C = softmax(bias), computed as a zero-query attention, MixSpa). Checked in float64 against a naive attention written here
// with the bias added to explicit scores and every term as an explicit T x T matrix (I, C);
// gradients of q, k, v, v1 and the per-head gains against central finite differences of the
// naive forward; float against double; bitwise determinism across thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "core/cpu_kernels.h"
#include "kernel_test_util.h"

namespace vt::cpu {
namespace {

using test::cast;
using test::check_fd;
using test::dot;
using test::expect_close;
using test::randn;
using test::Vec;

struct MixCase {
  AttnShape s;
  double scale = 0;
  Vec q, k, v, v1, bias, alpha, beta, gamma;
  double lam = 0;
  Vec rowscale;              // D[t] (empty: 1)
  bool centre_bias = false;  // C = softmax(bias) under the window, not uniform
  std::string name() const {
    return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" + std::to_string(s.H) +
           " Hkv" + std::to_string(s.Hkv) + " W" + std::to_string(s.window) +
           (rowscale.empty() ? "" : " D") + (centre_bias ? " Cb" : "");
  }
};

MixCase make_case(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, int64_t W,
                  uint64_t seed, bool bias, bool shaped, double lam, bool rowscale = false,
                  bool centre_bias = false) {
  MixCase c;
  c.s.B = B, c.s.T = T, c.s.H = H, c.s.Hkv = Hkv, c.s.hd = hd, c.s.window = W;
  c.scale = 1.0 / std::sqrt(double(hd));
  c.q = randn(B * T * H * hd, seed, 1.5);
  c.k = randn(B * T * Hkv * hd, seed + 1, 1.5);
  c.v = randn(B * T * Hkv * hd, seed + 2);
  c.v1 = randn(B * T * Hkv * hd, seed + 3);
  if (bias) {
    c.bias = randn(T * T, seed + 4, 2.0);
    // Some visible entries masked out by the bias itself (-inf), never the diagonal.
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < t; ++s)
        if ((t * 7 + s * 3) % 11 == 0) c.bias[t * T + s] = -std::numeric_limits<double>::infinity();
  }
  if (shaped) {
    c.alpha = randn(H, seed + 5, 0.7);
    c.beta = randn(H, seed + 6, 0.7);
    c.gamma = randn(H, seed + 7, 0.7);
  }
  // The kernels take the gains and lam as floats (they are f32 parameters): make the case's
  // values exactly representable so the double comparison is exact.
  for (Vec* gv : {&c.alpha, &c.beta, &c.gamma})
    for (double& x : *gv) x = static_cast<float>(x);
  c.lam = static_cast<float>(lam);
  if (rowscale) {
    c.rowscale = randn(T, seed + 8, 0.5);
    for (double& x : c.rowscale) x = static_cast<float>(1.0 + std::abs(x));  // D > 0, as row sums
  }
  c.centre_bias = centre_bias;
  return c;
}

// Naive: explicit scores (+ bias), masked softmax A, then (alpha I + D (beta A - gamma C)) v per
// head plus lam (v1 - v), with C[t][s] = 1/count(t) over the visible keys, or (centre_bias) the
// softmax of the bias alone over them.
Vec naive(const MixCase& c) {
  const AttnShape& s = c.s;
  const int64_t group = s.H / s.Hkv;
  Vec out(s.B * s.T * s.H * s.hd, 0.0), M(s.T);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = h / group;
      const double al = c.alpha.empty() ? 0.0 : c.alpha[h];
      const double be = c.beta.empty() ? 1.0 : c.beta[h];
      const double ga = c.gamma.empty() ? 0.0 : c.gamma[h];
      for (int64_t t = 0; t < s.T; ++t) {
        auto vis = [&](int64_t j) { return t - j >= 0 && t - j < s.window; };
        double mx = -INFINITY, count = 0;
        Vec sc(s.T, -INFINITY);
        for (int64_t j = 0; j < s.T; ++j) {
          if (!vis(j)) continue;
          ++count;
          double d = 0;
          for (int64_t e = 0; e < s.hd; ++e)
            d += c.q[((b * s.T + t) * s.H + h) * s.hd + e] * c.k[((b * s.T + j) * s.Hkv + g) * s.hd + e];
          sc[j] = c.scale * d + (c.bias.empty() ? 0.0 : c.bias[t * s.T + j]);
          mx = std::max(mx, sc[j]);
        }
        double sum = 0, bmx = -INFINITY, bsum = 0;
        for (int64_t j = 0; j < s.T; ++j)
          if (vis(j)) {
            sum += std::exp(sc[j] - mx);
            if (c.centre_bias) bmx = std::max(bmx, c.bias[t * s.T + j]);
          }
        if (c.centre_bias)
          for (int64_t j = 0; j < s.T; ++j)
            if (vis(j)) bsum += std::exp(c.bias[t * s.T + j] - bmx);
        const double D = c.rowscale.empty() ? 1.0 : c.rowscale[t];
        for (int64_t j = 0; j < s.T; ++j) {
          M[j] = 0;
          if (!vis(j)) continue;
          const double C =
              c.centre_bias ? std::exp(c.bias[t * s.T + j] - bmx) / bsum : 1.0 / count;
          M[j] = D * (be * std::exp(sc[j] - mx) / sum - ga * C) + (j == t ? al : 0.0);
        }
        for (int64_t j = 0; j < s.T; ++j)
          for (int64_t e = 0; e < s.hd; ++e)
            out[((b * s.T + t) * s.H + h) * s.hd + e] += M[j] * c.v[((b * s.T + j) * s.Hkv + g) * s.hd + e];
        for (int64_t e = 0; e < s.hd; ++e) {
          const int64_t vi = ((b * s.T + t) * s.Hkv + g) * s.hd + e;
          out[((b * s.T + t) * s.H + h) * s.hd + e] += c.lam * (c.v1[vi] - c.v[vi]);
        }
      }
    }
  return out;
}

const double* or_null(const Vec& v) { return v.empty() ? nullptr : v.data(); }
std::vector<float> f32(const Vec& v) { return cast<float>(v); }
const float* or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// The centring term on the bias as the ops compose it: attention of zero queries, one per KV
// head (centre and its lse0 like v and (B, Hkv, T)).
template <class T>
void zero_query_centre(const MixCase& c, const std::vector<T>& k, const std::vector<T>& v,
                       const std::vector<T>& bias, std::vector<T>& centre, std::vector<T>& lse0) {
  AttnShape s0 = c.s;
  s0.H = c.s.Hkv;
  const std::vector<T> q0(v.size(), T(0));
  centre.assign(v.size(), T(0));
  lse0.assign(c.s.B * c.s.Hkv * c.s.T, T(0));
  attention_forward<T>(q0.data(), k.data(), v.data(), centre.data(), lse0.data(), s0, T(c.scale),
                       bias.data());
}

// The kernels: softmax attention (with the bias) into soft, the mix into out.
template <class T>
void kernel_forward(const MixCase& c, const std::vector<T>& q, const std::vector<T>& k,
                    const std::vector<T>& v, const std::vector<T>& v1, const std::vector<T>& bias,
                    std::vector<T>& soft, std::vector<T>& lse, std::vector<T>& out,
                    std::vector<T>* centre_out = nullptr) {
  soft.assign(q.size(), T(0));
  lse.assign(c.s.B * c.s.H * c.s.T, T(0));
  out.assign(q.size(), T(0));
  attention_forward<T>(q.data(), k.data(), v.data(), soft.data(), lse.data(), c.s, T(c.scale),
                       bias.empty() ? nullptr : bias.data());
  const auto al = f32(c.alpha), be = f32(c.beta), ga = f32(c.gamma), rs = f32(c.rowscale);
  std::vector<T> centre, lse0;
  if (c.centre_bias) zero_query_centre<T>(c, k, v, bias, centre, lse0);
  MixSpa<T> spa;
  spa.rowscale = or_null(rs);
  spa.centre = centre.empty() ? nullptr : centre.data();
  attention_mix_forward<T>(soft.data(), v.data(), v1.data(), or_null(al), or_null(be),
                           or_null(ga), float(c.lam), out.data(), c.s, spa);
  if (centre_out) *centre_out = centre;
}

const std::vector<MixCase> cases() {
  return {
      make_case(2, 37, 4, 2, 8, 8, 1, true, true, 0.4),     // GQA, window < T, all terms
      make_case(1, 37, 4, 4, 8, 37, 2, false, true, 0.0),   // shaped only, full causal
      make_case(2, 37, 4, 1, 8, 5, 3, false, false, 0.7),   // NeuTRENO only, tiny window
      make_case(1, 150, 2, 1, 8, 150, 4, true, false, 0.0), // bias only, T > block
      make_case(1, 150, 4, 2, 8, 20, 5, true, true, 0.3),   // everything, window crosses blocks
      // E-SPA/U-SPA: the rowscale with either centring matrix.
      make_case(2, 37, 4, 2, 8, 8, 6, true, true, 0.4, true, true),
      make_case(1, 37, 4, 4, 8, 37, 7, true, true, 0.0, true, false),
      make_case(1, 150, 4, 2, 8, 20, 8, true, true, 0.0, false, true),
  };
}

TEST(KernelAttentionMix, ForwardMatchesNaive) {
  for (const MixCase& c : cases()) {
    const Vec ref = naive(c);
    Vec soft, lse, out;
    kernel_forward<double>(c, c.q, c.k, c.v, c.v1, c.bias, soft, lse, out);
    expect_close(out, ref, 1e-9, c.name() + " double");
    std::vector<float> sf, lf, of;
    kernel_forward<float>(c, f32(c.q), f32(c.k), f32(c.v), f32(c.v1), f32(c.bias), sf, lf, of);
    expect_close(of, ref, 1e-5, c.name() + " float");
  }
}

struct MixGrads {
  Vec dq, dk, dv, dv1;
  std::vector<float> dalpha, dbeta, dgamma;
};

template <class T>
MixGrads kernel_backward(const MixCase& c, const Vec& w, bool* dv1_written = nullptr) {
  auto cv = [](const Vec& x) { return std::vector<T>(x.begin(), x.end()); };
  const auto q = cv(c.q), k = cv(c.k), v = cv(c.v), v1 = cv(c.v1), bias = cv(c.bias), wt = cv(w);
  std::vector<T> soft, lse, out, centre, lse0;
  kernel_forward<T>(c, q, k, v, v1, bias, soft, lse, out);
  if (c.centre_bias) zero_query_centre<T>(c, k, v, bias, centre, lse0);
  std::vector<T> dsoft(q.size()), dvm(v.size(), T(0)), dv1(v.size(), T(-7));
  std::vector<T> dcentre(c.centre_bias ? v.size() : 0, T(-5));  // written (=), not added to
  MixGrads g;
  g.dalpha.assign(c.s.H, 0.5f);  // accumulated into: start from a known offset
  g.dbeta.assign(c.s.H, 0.5f);
  g.dgamma.assign(c.s.H, 0.5f);
  const auto al = f32(c.alpha), be = f32(c.beta), ga = f32(c.gamma), rs = f32(c.rowscale);
  MixSpa<T> spa;
  spa.rowscale = or_null(rs);
  spa.centre = centre.empty() ? nullptr : centre.data();
  spa.dcentre = dcentre.empty() ? nullptr : dcentre.data();
  attention_mix_backward<T>(wt.data(), soft.data(), v.data(), v1.data(), or_null(al), or_null(be),
                            or_null(ga), float(c.lam), dsoft.data(), dvm.data(),
                            g.dalpha.data(), g.dbeta.data(), g.dgamma.data(), dv1.data(), c.s,
                            spa);
  if (c.centre_bias) {  // carried back through the zero-query attention: only its dv is kept
    AttnShape s0 = c.s;
    s0.H = c.s.Hkv;
    const std::vector<T> q0(v.size(), T(0));
    std::vector<T> dq0(v.size()), dk0(k.size()), dv0(v.size());
    attention_backward<T>(q0.data(), k.data(), v.data(), centre.data(), lse0.data(),
                          dcentre.data(), dq0.data(), dk0.data(), dv0.data(), s0, T(c.scale),
                          bias.data());
    for (size_t i = 0; i < dv0.size(); ++i) dvm[i] += dv0[i];
  }
  for (auto* d : {&g.dalpha, &g.dbeta, &g.dgamma})
    for (float& x : *d) x -= 0.5f;
  std::vector<T> dq(q.size()), dk(k.size()), dv(v.size());
  attention_backward<T>(q.data(), k.data(), v.data(), soft.data(), lse.data(), dsoft.data(),
                        dq.data(), dk.data(), dv.data(), c.s, T(c.scale),
                        bias.empty() ? nullptr : bias.data());
  for (size_t i = 0; i < dv.size(); ++i) dv[i] += dvm[i];
  g.dq.assign(dq.begin(), dq.end());
  g.dk.assign(dk.begin(), dk.end());
  g.dv.assign(dv.begin(), dv.end());
  g.dv1.assign(dv1.begin(), dv1.end());
  return g;
}

TEST(KernelAttentionMix, BackwardMatchesFiniteDifferences) {
  for (MixCase c : cases()) {
    const Vec w = randn(c.q.size(), 77);
    const MixGrads g = kernel_backward<double>(c, w);
    auto objective = [&] { return dot(w, naive(c)); };
    const size_t probes = c.s.T > 64 ? 150 : 600;
    check_fd(c.q, objective, g.dq, c.name() + " dq", probes);
    check_fd(c.k, objective, g.dk, c.name() + " dk", probes);
    check_fd(c.v, objective, g.dv, c.name() + " dv", probes);
    check_fd(c.v1, objective, c.lam != 0 ? g.dv1 : Vec(c.v1.size(), 0.0), c.name() + " dv1",
             probes);
    // Gains are float parameters: compare in double against finite differences (tolerance of
    // the float rounding of their accumulation).
    if (!c.alpha.empty()) {
      check_fd(c.alpha, objective, cast<double>(g.dalpha), c.name() + " dalpha", 50, 1e-5, 1e-5);
      check_fd(c.beta, objective, cast<double>(g.dbeta), c.name() + " dbeta", 50, 1e-5, 1e-5);
      check_fd(c.gamma, objective, cast<double>(g.dgamma), c.name() + " dgamma", 50, 1e-5, 1e-5);
    }
  }
}

TEST(KernelAttentionMix, CentreOnBiasWithoutBiasTermsIsTheUniformMean) {
  // With a zero bias the zero-query attention is the uniform mean over the window: both
  // centring paths must then give the same mix.
  MixCase c = make_case(2, 37, 4, 2, 8, 8, 9, true, true, 0.0, true, false);
  c.bias.assign(c.bias.size(), 0.0);
  Vec soft, lse, uniform, on_bias;
  kernel_forward<double>(c, c.q, c.k, c.v, c.v1, c.bias, soft, lse, uniform);
  c.centre_bias = true;
  kernel_forward<double>(c, c.q, c.k, c.v, c.v1, c.bias, soft, lse, on_bias);
  expect_close(on_bias, uniform, 1e-12, "centre on a zero bias vs the running mean");
}

TEST(KernelAttentionMix, FloatAgreesWithDoubleAndIsDeterministic) {
  for (const MixCase& c : {cases()[4], cases()[5]}) {
    const Vec w = randn(c.q.size(), 66);
    const MixGrads gd = kernel_backward<double>(c, w);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const MixGrads g1 = kernel_backward<float>(c, w);
    omp_set_num_threads(3);
    const MixGrads g3 = kernel_backward<float>(c, w);
    omp_set_num_threads(saved);
    expect_close(g1.dq, gd.dq, 5e-5, "float dq");
    expect_close(g1.dk, gd.dk, 5e-5, "float dk");
    expect_close(g1.dv, gd.dv, 5e-5, "float dv");
    expect_close(g1.dv1, gd.dv1, 5e-5, "float dv1");
    EXPECT_TRUE(g1.dq == g3.dq && g1.dk == g3.dk && g1.dv == g3.dv && g1.dv1 == g3.dv1 &&
                g1.dalpha == g3.dalpha && g1.dbeta == g3.dbeta && g1.dgamma == g3.dgamma)
        << "results depend on the thread count";
  }
}

}  // namespace
}  // namespace vt::cpu
