// GPU attention (kernels/attention.cu) against the CPU reference vt::cpu::attention_forward /
// attention_backward on random inputs: full causal and sliding windows, GQA and MQA, T not a
// multiple of the 32-row tile, several head dims. Skips without a CUDA device.
//
// Tolerances. fp32: both sides compute in fp32 and differ only in summation order and exp
// (CPU: ~1 ulp polynomial, GPU: expf ~2 ulp). out is a convex combination of v rows (|v| ~ 1),
// so errors are a few ulp times sqrt(keys) ~ 1e-6; the gradients sum up to T * group terms and
// dS has the cancellation dP - D, so they are compared with 1e-4 relative to the largest
// reference value (plus 1e-4 of the element). bf16: the CPU runs on the same bf16-rounded
// inputs in fp32, so the differences are the bf16 rounding of the outputs (2^-8 relative) and,
// in backward, D computed from the bf16-rounded out: compared by relative Frobenius error,
// 1e-2 for out and 3e-2 for the gradients (lse is fp32 on both sides: 1e-4).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cpu_kernels.h"
#include "kernels/attention.cuh"
#include "gpu_test_util.h"

namespace {

template <class T>
using DeviceBuffer = vt::gputest::RawDeviceBuffer<T>;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) { return vt::gputest::to_nv_bf16(v); }
std::vector<float> to_f32(const std::vector<__nv_bfloat16>& v) { return vt::gputest::nv_bf16_to_f32(v); }
std::vector<float> round_bf16(const std::vector<float>& v) { return to_f32(to_bf16(v)); }

// Per element: |got - ref| <= rel_max * max|ref| + rel_elem * |ref| + atol; all finite.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel_max,
                  double rel_elem, const char* what, double atol = 0.0) {
  ASSERT_EQ(got.size(), ref.size());
  double mx = 0;
  for (float r : ref) mx = std::max(mx, double(std::fabs(r)));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(ref[i]));
    const double tol = rel_max * std::max(mx, 1e-30) + rel_elem * std::fabs(ref[i]) + atol;
    if (!std::isfinite(got[i]) || err > tol) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i]
                      << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements off";
}

double rms(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s / double(std::max<size_t>(x.size(), 1)));
}

// ||got - ref|| <= tol * max(||ref||, floor).
void expect_rel_norm(const std::vector<float>& got, const std::vector<float>& ref, double tol,
                     const char* what, double floor = 0.0) {
  ASSERT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  EXPECT_LE(std::sqrt(num / std::max({den, floor * floor, 1e-30})), tol) << what;
}

std::vector<vt::cpu::AttnShape> shapes() {
  auto mk = [](int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, int64_t W) {
    vt::cpu::AttnShape s;
    s.B = B, s.T = T, s.H = H, s.Hkv = Hkv, s.hd = hd, s.window = W;
    return s;
  };
  return {
      mk(2, 100, 4, 2, 32, 100),  // full causal, GQA 2, T % 32 != 0
      mk(1, 130, 4, 1, 64, 40),   // window < T, MQA
      mk(2, 64, 2, 2, 16, 1),     // window 1: each query sees only itself
      mk(1, 77, 6, 3, 128, 33),   // hd 128, window not a tile multiple
      mk(1, 50, 2, 1, 24, 1000),  // window > T, hd not a multiple of 32
      mk(1, 5, 3, 1, 8, 2),       // T smaller than a tile
  };
}

struct Ref {
  std::vector<float> out, lse, dq, dk, dv;
};

Ref cpu_ref(const vt::cpu::AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const std::vector<float>& dout, float scale) {
  Ref r;
  r.out.resize(q.size());
  r.lse.resize(size_t(s.B * s.H * s.T));
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(v.size());
  vt::cpu::attention_forward<float>(q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), s,
                                    scale);
  vt::cpu::attention_backward<float>(q.data(), k.data(), v.data(), r.out.data(), r.lse.data(),
                                     dout.data(), r.dq.data(), r.dk.data(), r.dv.data(), s,
                                     scale);
  return r;
}

TEST(GpuAttention, Fp32MatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  uint32_t seed = 1;
  for (const auto& s : shapes()) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " H=" << s.H
                                    << " Hkv=" << s.Hkv << " hd=" << s.hd << " W=" << s.window);
    const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
    const float scale = 1.0f / std::sqrt(float(s.hd));
    const auto q = random_vec(nq, seed++), k = random_vec(nk, seed++), v = random_vec(nk, seed++);
    const auto dout = random_vec(nq, seed++);
    const Ref ref = cpu_ref(s, q, k, v, dout, scale);

    DeviceBuffer<float> dq_(q), dk_(k), dv_(v), ddout(dout), out(nq), lse(ref.lse.size());
    DeviceBuffer<float> gq(nq), gk(nk), gv(nk);
    DeviceBuffer<char> ws(vt::cuda::attention_backward_workspace_bytes(s));
    vt::cuda::attention_forward(dq_.p, dk_.p, dv_.p, out.p, lse.p, s, scale, nullptr);
    vt::cuda::attention_backward(dq_.p, dk_.p, dv_.p, out.p, lse.p, ddout.p, gq.p, gk.p, gv.p, s,
                                 scale, ws.p, nullptr);
    VT_CUDA_CHECK(cudaDeviceSynchronize());

    expect_close(out.get(), ref.out, 1e-5, 1e-5, "out");
    expect_close(lse.get(), ref.lse, 1e-5, 1e-5, "lse");
    // dq and dk sum dS = P (dO.V - D) scale over keys/queries: the difference cancels (exactly
    // at window 1, where P = 1 and dq = dk = 0), so their error is absolute on the scale of the
    // terms, scale * hd * rms(dO) rms(V) rms(K), not of the result.
    const double terms = scale * double(s.hd) * rms(dout) * rms(v) * rms(k);
    expect_close(gq.get(), ref.dq, 1e-4, 1e-4, "dq", 1e-5 * terms);
    expect_close(gk.get(), ref.dk, 1e-4, 1e-4, "dk", 1e-5 * terms);
    expect_close(gv.get(), ref.dv, 1e-4, 1e-4, "dv");
  }
}

TEST(GpuAttention, Bf16MatchesCpuOnRoundedInputs) {
  VT_SKIP_WITHOUT_CUDA();
  uint32_t seed = 100;
  for (const auto& s : shapes()) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " H=" << s.H
                                    << " Hkv=" << s.Hkv << " hd=" << s.hd << " W=" << s.window);
    const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
    const float scale = 1.0f / std::sqrt(float(s.hd));
    const auto q = round_bf16(random_vec(nq, seed++)), k = round_bf16(random_vec(nk, seed++));
    const auto v = round_bf16(random_vec(nk, seed++)), dout = round_bf16(random_vec(nq, seed++));
    const Ref ref = cpu_ref(s, q, k, v, dout, scale);

    using bf = __nv_bfloat16;
    DeviceBuffer<bf> bq(to_bf16(q)), bk(to_bf16(k)), bv(to_bf16(v)), bdout(to_bf16(dout));
    DeviceBuffer<bf> out(nq), gq(nq), gk(nk), gv(nk);
    DeviceBuffer<float> lse(ref.lse.size());
    DeviceBuffer<char> ws(vt::cuda::attention_backward_workspace_bytes(s));
    vt::cuda::attention_forward(bq.p, bk.p, bv.p, out.p, lse.p, s, scale, nullptr);
    vt::cuda::attention_backward(bq.p, bk.p, bv.p, out.p, lse.p, bdout.p, gq.p, gk.p, gv.p, s,
                                 scale, ws.p, nullptr);
    VT_CUDA_CHECK(cudaDeviceSynchronize());

    expect_rel_norm(to_f32(out.get()), ref.out, 1e-2, "out");
    expect_close(lse.get(), ref.lse, 1e-4, 1e-4, "lse");
    // Cancelling sums, as in the fp32 test: the floor is the norm of terms-sized entries.
    const double terms = scale * double(s.hd) * rms(dout) * rms(v) * rms(k);
    expect_rel_norm(to_f32(gq.get()), ref.dq, 3e-2, "dq", 0.1 * terms * std::sqrt(double(nq)));
    expect_rel_norm(to_f32(gk.get()), ref.dk, 3e-2, "dk", 0.1 * terms * std::sqrt(double(nk)));
    expect_rel_norm(to_f32(gv.get()), ref.dv, 3e-2, "dv");
  }
}

// Backward has no atomics: two runs give bitwise identical gradients.
TEST(GpuAttention, BackwardIsDeterministic) {
  VT_SKIP_WITHOUT_CUDA();
  vt::cpu::AttnShape s;
  s.B = 2, s.T = 96, s.H = 4, s.Hkv = 1, s.hd = 32, s.window = 50;
  const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
  const float scale = 1.0f / std::sqrt(float(s.hd));
  DeviceBuffer<float> q(random_vec(nq, 7)), k(random_vec(nk, 8)), v(random_vec(nk, 9));
  DeviceBuffer<float> dout(random_vec(nq, 10)), out(nq), lse(size_t(s.B * s.H * s.T));
  DeviceBuffer<float> gq(nq), gk(nk), gv(nk);
  DeviceBuffer<char> ws(vt::cuda::attention_backward_workspace_bytes(s));
  vt::cuda::attention_forward(q.p, k.p, v.p, out.p, lse.p, s, scale, nullptr);
  vt::cuda::attention_backward(q.p, k.p, v.p, out.p, lse.p, dout.p, gq.p, gk.p, gv.p, s, scale,
                               ws.p, nullptr);
  const auto a_q = gq.get(), a_k = gk.get(), a_v = gv.get();
  vt::cuda::attention_backward(q.p, k.p, v.p, out.p, lse.p, dout.p, gq.p, gk.p, gv.p, s, scale,
                               ws.p, nullptr);
  EXPECT_EQ(a_q, gq.get());
  EXPECT_EQ(a_k, gk.get());
  EXPECT_EQ(a_v, gv.get());
}

}  // namespace
