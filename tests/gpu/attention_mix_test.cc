// GPU attention additions of the block shapes and NeuTRENO against the CPU reference kernels:
// the fixed logit bias inside kernels/attention.cu (forward and both backward kernels) and the
// shaped / NeuTRENO mix of kernels/attention_mix.cu (out = D (beta*soft - gamma*C v) + alpha*v +
// lam*(v1 - v) by running window sums, or with a given centring term and the E-SPA/U-SPA rowscale
// D), forward and backward, fp32 and bf16, and determinism.
// Small shapes (the CUDA emulation runs every test in both thread orders). Skips without a
// device.
//
// Tolerances. fp32: both sides compute the mix in double over fp32 inputs and differ only in
// the softmax part (summation order, expf vs the CPU polynomial): 1e-5 of the largest reference
// value for outputs, 1e-4 for gradients (as kernels/attention's own test). The gain gradients
// are sums over B*T*hd products, compared at 1e-4 relative. bf16: the CPU runs on the same
// bf16-rounded inputs in fp32; the GPU rounds each output to bf16 once more (2^-8): relative
// Frobenius 1e-2 for outputs, 3e-2 for gradients.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"
#include "kernels/attention.cuh"
#include "kernels/attention_mix.cuh"

namespace {

using vt::cpu::AttnShape;
template <class T>
using DeviceBuffer = vt::gputest::RawDeviceBuffer<T>;
using vt::gputest::randn;

struct Case {
  AttnShape s;
  bool bias, shaped;
  float lam;
  bool spa = false;  // a rowscale D and a given centring term (vt::cpu::MixSpa)
};

Case spa(Case c) {
  c.spa = true;
  return c;
}

std::vector<Case> cases() {
  auto mk = [](int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, int64_t W, bool bias,
               bool shaped, float lam) {
    Case c;
    c.s.B = B, c.s.T = T, c.s.H = H, c.s.Hkv = Hkv, c.s.hd = hd, c.s.window = W;
    c.bias = bias, c.shaped = shaped, c.lam = lam;
    return c;
  };
  return {
      mk(2, 40, 4, 2, 16, 40, true, true, 0.4f),   // everything, full causal, GQA
      mk(1, 37, 4, 1, 8, 9, false, true, 0.0f),    // shaped only, window < T, MQA
      mk(1, 33, 2, 2, 8, 33, true, false, 0.0f),   // bias only, T past one tile
      mk(2, 20, 4, 2, 8, 5, false, false, 0.7f),   // NeuTRENO only, small window
      spa(mk(2, 40, 4, 2, 16, 12, true, true, 0.4f)),  // E-SPA/U-SPA terms, everything else
      spa(mk(1, 33, 4, 4, 8, 33, true, true, 0.0f)),   // E-SPA/U-SPA terms, full causal
  };
}

// Per element: |got - ref| <= rel_max * max|ref| + atol; all finite.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel_max,
                  const char* what, double atol = 0.0) {
  ASSERT_EQ(got.size(), ref.size());
  double mx = 0;
  for (float r : ref) mx = std::max(mx, double(std::fabs(r)));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    if (!std::isfinite(got[i]) || err > rel_max * std::max(mx, 1e-30) + atol) {
      if (++bad <= 3) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

void expect_rel_norm(const std::vector<float>& got, const std::vector<float>& ref, double tol,
                     const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), tol) << what;
}

struct Inputs {
  std::vector<float> q, k, v, v1, dout, bias, alpha, beta, gamma, rowscale, centre;
};

Inputs inputs(const Case& c, uint64_t seed, bool bf16) {
  const AttnShape& s = c.s;
  const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
  auto r = [&](size_t n, uint64_t sd, float sdv) {
    auto x = randn(n, sd, sdv);
    return bf16 ? vt::gputest::rounded_bf16(x) : x;
  };
  Inputs in;
  in.q = r(nq, seed, 1.5f), in.k = r(nk, seed + 1, 1.5f), in.v = r(nk, seed + 2, 1.0f);
  in.v1 = r(nk, seed + 3, 1.0f), in.dout = r(nq, seed + 4, 1.0f);
  if (c.bias) {
    in.bias = randn(size_t(s.T * s.T), seed + 5, 2.0f);
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t j = 0; j < t; ++j)
        if ((t * 7 + j * 3) % 11 == 0) in.bias[t * s.T + j] = -std::numeric_limits<float>::infinity();
  }
  if (c.spa) {
    in.rowscale = randn(size_t(s.T), seed + 9, 0.5f);
    for (float& x : in.rowscale) x = 1.0f + std::fabs(x);
    in.centre = r(nk, seed + 10, 1.0f);
  }
  if (c.shaped) {
    in.alpha = randn(s.H, seed + 6, 0.7f);
    in.beta = randn(s.H, seed + 7, 0.7f);
    in.gamma = randn(s.H, seed + 8, 0.7f);
  }
  return in;
}

const float* ptr(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

struct Out {
  std::vector<float> out, dq, dk, dv, dv1, dalpha, dbeta, dgamma, dcentre;
};

Out cpu(const Case& c, const Inputs& in) {
  const AttnShape& s = c.s;
  const float scale = 1.0f / std::sqrt(float(s.hd));
  Out o;
  std::vector<float> soft(in.q.size()), lse(size_t(s.B * s.H * s.T)), dsoft(in.q.size());
  o.out.resize(in.q.size());
  vt::cpu::attention_forward<float>(in.q.data(), in.k.data(), in.v.data(), soft.data(), lse.data(),
                                    s, scale, ptr(in.bias));
  vt::cpu::MixSpa<float> spa;
  o.dcentre.assign(in.centre.size(), 0.0f);
  spa.rowscale = ptr(in.rowscale);
  spa.centre = ptr(in.centre);
  spa.dcentre = o.dcentre.empty() ? nullptr : o.dcentre.data();
  vt::cpu::attention_mix_forward<float>(soft.data(), in.v.data(), in.v1.data(), ptr(in.alpha),
                                        ptr(in.beta), ptr(in.gamma), c.lam, o.out.data(), s, spa);
  o.dq.resize(in.q.size()), o.dk.resize(in.k.size()), o.dv.resize(in.v.size());
  o.dv1.resize(in.v.size());
  o.dalpha.assign(s.H, 0.0f), o.dbeta.assign(s.H, 0.0f), o.dgamma.assign(s.H, 0.0f);
  std::vector<float> dvm(in.v.size(), 0.0f);
  vt::cpu::attention_mix_backward<float>(in.dout.data(), soft.data(), in.v.data(), nullptr,
                                         ptr(in.alpha), ptr(in.beta), ptr(in.gamma), c.lam,
                                         dsoft.data(), dvm.data(), o.dalpha.data(),
                                         o.dbeta.data(), o.dgamma.data(), o.dv1.data(), s, spa);
  vt::cpu::attention_backward<float>(in.q.data(), in.k.data(), in.v.data(), soft.data(),
                                     lse.data(), dsoft.data(), o.dq.data(), o.dk.data(),
                                     o.dv.data(), s, scale, ptr(in.bias));
  for (size_t i = 0; i < dvm.size(); ++i) o.dv[i] += dvm[i];
  return o;
}

template <class E>
Out gpu(const Case& c, const Inputs& in) {
  const AttnShape& s = c.s;
  const float scale = 1.0f / std::sqrt(float(s.hd));
  auto up = [](const std::vector<float>& x) {
    if constexpr (std::is_same_v<E, float>) return x;
    else return vt::gputest::to_nv_bf16(x);
  };
  auto down = [](const std::vector<E>& x) {
    if constexpr (std::is_same_v<E, float>) return x;
    else return vt::gputest::nv_bf16_to_f32(x);
  };
  const size_t nq = in.q.size(), nk = in.k.size();
  DeviceBuffer<E> q(up(in.q)), k(up(in.k)), v(up(in.v)), v1(up(in.v1)), dout(up(in.dout));
  DeviceBuffer<E> soft(nq), out(nq), dsoft(nq), gq(nq), gk(nk), gv(nk), gv1(nk);
  DeviceBuffer<E> dvm(std::vector<E>(nk, E(0.0f)));
  DeviceBuffer<float> lse(size_t(s.B * s.H * s.T));
  std::unique_ptr<DeviceBuffer<float>> bias, al, be, ga, dal, dbe, dga;
  if (!in.bias.empty()) bias = std::make_unique<DeviceBuffer<float>>(in.bias);
  if (!in.alpha.empty()) {
    al = std::make_unique<DeviceBuffer<float>>(in.alpha);
    be = std::make_unique<DeviceBuffer<float>>(in.beta);
    ga = std::make_unique<DeviceBuffer<float>>(in.gamma);
    const std::vector<float> zero(s.H, 0.0f);
    dal = std::make_unique<DeviceBuffer<float>>(zero);
    dbe = std::make_unique<DeviceBuffer<float>>(zero);
    dga = std::make_unique<DeviceBuffer<float>>(zero);
  }
  auto p = [](const std::unique_ptr<DeviceBuffer<float>>& b) { return b ? b->p : nullptr; };
  std::unique_ptr<DeviceBuffer<float>> rowscale;
  std::unique_ptr<DeviceBuffer<E>> centre, dcentre;
  vt::cuda::MixSpa<E> spa;
  if (c.spa) {
    rowscale = std::make_unique<DeviceBuffer<float>>(in.rowscale);
    centre = std::make_unique<DeviceBuffer<E>>(up(in.centre));
    dcentre = std::make_unique<DeviceBuffer<E>>(nk);
    spa.rowscale = rowscale->p, spa.centre = centre->p, spa.dcentre = dcentre->p;
  }
  DeviceBuffer<char> ws(std::max(vt::cuda::attention_backward_workspace_bytes(s),
                                 vt::cuda::attention_mix_workspace_bytes(s)));
  vt::cuda::attention_forward(q.p, k.p, v.p, soft.p, lse.p, s, scale, nullptr, p(bias));
  vt::cuda::attention_mix_forward(soft.p, v.p, c.lam != 0.0f ? v1.p : nullptr, p(al), p(be),
                                  p(ga), c.lam, out.p, s, spa, nullptr);
  vt::cuda::attention_mix_backward(dout.p, soft.p, v.p, p(al), p(be), p(ga), c.lam, dsoft.p,
                                   dvm.p, p(dal), p(dbe), p(dga), gv1.p, s, spa, ws.p, nullptr);
  vt::cuda::attention_backward(q.p, k.p, v.p, soft.p, lse.p, dsoft.p, gq.p, gk.p, gv.p, s, scale,
                               ws.p, nullptr, p(bias));
  VT_CUDA_CHECK(cudaDeviceSynchronize());
  Out o;
  o.out = down(out.get()), o.dq = down(gq.get()), o.dk = down(gk.get());
  o.dv = down(gv.get());
  const auto dm = down(dvm.get());
  for (size_t i = 0; i < o.dv.size(); ++i) o.dv[i] += dm[i];
  o.dv1 = down(gv1.get());
  if (dcentre) o.dcentre = down(dcentre->get());
  if (dal) o.dalpha = dal->get(), o.dbeta = dbe->get(), o.dgamma = dga->get();
  else o.dalpha = o.dbeta = o.dgamma = std::vector<float>(s.H, 0.0f);
  return o;
}

TEST(GpuAttentionMix, Fp32MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  uint64_t seed = 11;
  for (const Case& c : cases()) {
    SCOPED_TRACE(testing::Message() << "T=" << c.s.T << " W=" << c.s.window << " bias=" << c.bias
                                    << " shaped=" << c.shaped << " lam=" << c.lam
                                    << " spa=" << c.spa);
    const Inputs in = inputs(c, seed, false);
    seed += 10;
    const Out ref = cpu(c, in), got = gpu<float>(c, in);
    expect_close(got.out, ref.out, 1e-5, "out");
    expect_close(got.dq, ref.dq, 1e-4, "dq");
    expect_close(got.dk, ref.dk, 1e-4, "dk");
    expect_close(got.dv, ref.dv, 1e-4, "dv");
    if (c.lam != 0.0f) expect_close(got.dv1, ref.dv1, 1e-5, "dv1");
    if (c.spa) expect_close(got.dcentre, ref.dcentre, 1e-5, "dcentre");
    if (c.shaped) {
      expect_close(got.dalpha, ref.dalpha, 1e-4, "dalpha");
      expect_close(got.dbeta, ref.dbeta, 1e-4, "dbeta");
      expect_close(got.dgamma, ref.dgamma, 1e-4, "dgamma");
    }
  }
}

TEST(GpuAttentionMix, Bf16MatchesCpuOnRoundedInputs) {
  VT_SKIP_WITHOUT_CUDA();
  uint64_t seed = 211;
  for (const Case& c : cases()) {
    SCOPED_TRACE(testing::Message() << "T=" << c.s.T << " W=" << c.s.window);
    const Inputs in = inputs(c, seed, true);
    seed += 10;
    const Out ref = cpu(c, in), got = gpu<__nv_bfloat16>(c, in);
    expect_rel_norm(got.out, ref.out, 1e-2, "out");
    expect_rel_norm(got.dq, ref.dq, 3e-2, "dq");
    expect_rel_norm(got.dk, ref.dk, 3e-2, "dk");
    expect_rel_norm(got.dv, ref.dv, 3e-2, "dv");
    if (c.shaped) expect_rel_norm(got.dgamma, ref.dgamma, 3e-2, "dgamma");
    if (c.spa) expect_rel_norm(got.dcentre, ref.dcentre, 1e-2, "dcentre");
  }
}

TEST(GpuAttentionMix, BackwardIsDeterministic) {
  VT_SKIP_WITHOUT_CUDA();
  const Case c = cases()[0];
  const Inputs in = inputs(c, 5, false);
  const Out a = gpu<float>(c, in), b = gpu<float>(c, in);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.dgamma, b.dgamma);
  EXPECT_EQ(a.dv1, b.dv1);
}

}  // namespace
