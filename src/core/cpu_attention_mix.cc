// CPU shaped-attention / NeuTRENO terms (semantics in cpu_kernels.h, attention_mix_*).
//
// Work items are (batch, KV head) pairs; each walks the sequence once keeping, per channel, the
// sum of v over the current window in double (add v[t], drop v[t - W]), so the running mean
// costs O(T * hd) and no T x T matrix exists. The backward's running-mean term is the transpose:
// position s receives sum over the queries t that see it (t in [s, s + W - 1]) of
// u[t] = -D[t] sum_h gamma[h] dout[t,h] / count(t), again a running window sum walked backwards.
// A centring term given by the caller (E-SPA/U-SPA, MixSpa) replaces the running mean: its
// gradient is written out for the caller to carry back, and D[t] scales both mixed terms.
// Per-head gain gradients are summed per item in double and combined in item order, so the
// results do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/cpu_kernels.h"

namespace vt::cpu {

namespace {
inline int64_t visible(int64_t t, int64_t W) { return std::min(t + 1, W); }
}  // namespace

template <class T>
void attention_mix_forward(const T* soft, const T* v, const T* v1, const float* alpha,
                           const float* beta, const float* gamma, float lam, T* out,
                           const AttnShape& s, const MixSpa<T>& spa) {
  const int64_t B = s.B, Tn = s.T, H = s.H, Hkv = s.Hkv, hd = s.hd;
  const int64_t W = std::min(s.window, Tn), group = H / Hkv;
  VT_CHECK(lam == 0.0f || v1 != nullptr);
  // The running mean is needed only for a centring term the caller did not give.
  const bool running = gamma != nullptr && spa.centre == nullptr;
  const int64_t items = B * Hkv;
#pragma omp parallel for schedule(static) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / Hkv, g = item % Hkv;
    std::vector<double> sum(hd, 0.0);
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t voff = ((b * Tn + t) * Hkv + g) * hd;
      const T* vt = v + voff;
      if (running) {
        for (int64_t c = 0; c < hd; ++c) sum[c] += static_cast<double>(vt[c]);
        if (t >= W) {
          const T* old = v + ((b * Tn + t - W) * Hkv + g) * hd;
          for (int64_t c = 0; c < hd; ++c) sum[c] -= static_cast<double>(old[c]);
        }
      }
      const double inv = 1.0 / static_cast<double>(visible(t, W));
      const double D = spa.rowscale ? static_cast<double>(spa.rowscale[t]) : 1.0;
      const T* v1t = lam != 0.0f ? v1 + voff : nullptr;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t off = ((b * Tn + t) * H + h) * hd;
        const double be = beta ? beta[h] : 1.0, al = alpha ? alpha[h] : 0.0;
        const double ga = gamma ? gamma[h] : 0.0;
        for (int64_t c = 0; c < hd; ++c) {
          double mixed = be * static_cast<double>(soft[off + c]);
          if (gamma)
            mixed -= ga * (spa.centre ? static_cast<double>(spa.centre[voff + c]) : sum[c] * inv);
          double o = D * mixed + (al - lam) * vt[c];
          if (v1t) o += static_cast<double>(lam) * v1t[c];
          out[off + c] = static_cast<T>(o);
        }
      }
    }
  }
}

template <class T>
void attention_mix_backward(const T* dout, const T* soft, const T* v, const T* v1,
                            const float* alpha, const float* beta, const float* gamma, float lam,
                            T* dsoft, T* dv, float* dalpha, float* dbeta, float* dgamma, T* dv1,
                            const AttnShape& s, const MixSpa<T>& spa) {
  const int64_t B = s.B, Tn = s.T, H = s.H, Hkv = s.Hkv, hd = s.hd;
  const int64_t W = std::min(s.window, Tn), group = H / Hkv;
  (void)v1;
  VT_CHECK_MSG((spa.centre == nullptr) == (spa.dcentre == nullptr),
               "a given centring term needs its gradient output, and only then");
  const bool running = gamma != nullptr && spa.centre == nullptr;
  const int64_t items = B * Hkv;
  // Per item: the gain gradients of its heads (alpha, beta, gamma).
  std::vector<double> partial(items * group * 3, 0.0);
#pragma omp parallel for schedule(static) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / Hkv, g = item % Hkv;
    double* part = partial.data() + item * group * 3;
    std::vector<double> sum(hd, 0.0), u(running ? Tn * hd : 0, 0.0);
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t voff = ((b * Tn + t) * Hkv + g) * hd;
      const T* vt = v + voff;
      if (running) {
        for (int64_t c = 0; c < hd; ++c) sum[c] += static_cast<double>(vt[c]);
        if (t >= W) {
          const T* old = v + ((b * Tn + t - W) * Hkv + g) * hd;
          for (int64_t c = 0; c < hd; ++c) sum[c] -= static_cast<double>(old[c]);
        }
      }
      const double inv = 1.0 / static_cast<double>(visible(t, W));
      const double D = spa.rowscale ? static_cast<double>(spa.rowscale[t]) : 1.0;
      for (int64_t c = 0; c < hd; ++c) {
        const double M =
            gamma ? (spa.centre ? static_cast<double>(spa.centre[voff + c]) : sum[c] * inv) : 0.0;
        double direct = 0.0, total = 0.0, ug = 0.0;
        for (int64_t k = 0; k < group; ++k) {
          const int64_t h = g * group + k;
          const int64_t off = ((b * Tn + t) * H + h) * hd + c;
          const double d = static_cast<double>(dout[off]);
          const double be = beta ? beta[h] : 1.0, al = alpha ? alpha[h] : 0.0;
          dsoft[off] = static_cast<T>(D * be * d);
          direct += (al - lam) * d;
          total += d;
          part[k * 3 + 0] += d * static_cast<double>(vt[c]);
          part[k * 3 + 1] += d * D * static_cast<double>(soft[off]);
          if (gamma) {
            part[k * 3 + 2] -= d * D * M;
            ug -= gamma[h] * d;
          }
        }
        dv[voff + c] = static_cast<T>(static_cast<double>(dv[voff + c]) + direct);
        if (dv1) dv1[voff + c] = static_cast<T>(lam * total);
        if (spa.dcentre) spa.dcentre[voff + c] = static_cast<T>(D * ug);
        if (running) u[t * hd + c] = D * ug * inv;
      }
    }
    if (running) {  // dv[s] += sum_{t = s}^{s + W - 1} u[t]
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t t = Tn - 1; t >= 0; --t) {
        const int64_t voff = ((b * Tn + t) * Hkv + g) * hd;
        for (int64_t c = 0; c < hd; ++c) {
          sum[c] += u[t * hd + c];
          if (t + W < Tn) sum[c] -= u[(t + W) * hd + c];
          dv[voff + c] = static_cast<T>(static_cast<double>(dv[voff + c]) + sum[c]);
        }
      }
    }
  }
  std::vector<double> head(H * 3, 0.0);
  for (int64_t item = 0; item < items; ++item) {
    const int64_t g = item % Hkv;
    for (int64_t k = 0; k < group * 3; ++k) head[g * group * 3 + k] += partial[item * group * 3 + k];
  }
  for (int64_t h = 0; h < H; ++h) {
    if (dalpha) dalpha[h] += static_cast<float>(head[h * 3 + 0]);
    if (dbeta) dbeta[h] += static_cast<float>(head[h * 3 + 1]);
    if (dgamma) dgamma[h] += static_cast<float>(head[h * 3 + 2]);
  }
}

template void attention_mix_forward<float>(const float*, const float*, const float*, const float*,
                                           const float*, const float*, float, float*,
                                           const AttnShape&, const MixSpa<float>&);
template void attention_mix_forward<double>(const double*, const double*, const double*,
                                            const float*, const float*, const float*, float,
                                            double*, const AttnShape&, const MixSpa<double>&);
template void attention_mix_backward<float>(const float*, const float*, const float*,
                                            const float*, const float*, const float*,
                                            const float*, float, float*, float*, float*, float*,
                                            float*, float*, const AttnShape&,
                                            const MixSpa<float>&);
template void attention_mix_backward<double>(const double*, const double*, const double*,
                                             const double*, const float*, const float*,
                                             const float*, float, double*, double*, float*,
                                             float*, float*, double*, const AttnShape&,
                                             const MixSpa<double>&);

}  // namespace vt::cpu
