// Tensor-core attention (kernels/attention_tc.cu) against the CPU reference and against the
// reference GPU kernel (kernels/attention.cu), forward and backward, bf16: head dims 32, 64 and
// 128, full causal and sliding windows (windows that skip whole key tiles, window 1, window > T),
// GQA and MQA, T not a multiple of the tiles (forward 128 queries x 32-key sub-tiles, backward 64)
// and smaller than them, windows whose edge falls one before / one after a tile boundary, peaked
// softmax rows. The v1 kernels (the 2026-11-26 forward and backward, kept for attention_bench's
// old-vs-new timing) are checked against the CPU on the same cases, with the same bounds.
// Skips without a CUDA device; on the emulation (~1 min for both thread orders) the kernels run
// their mma.sync / ldmatrix / cp.async through cuda_emu's PTX-layout implementation.
//
// Tolerances are derived per element, not tuned. Both sides see the same bf16 inputs; the CPU
// computes in fp32 from them. The tensor-core kernels differ by (u = 2^-8, one rounding to bf16,
// whose 8 significant bits leave at most half an ulp = 2^-8 relative):
//   out:  P rounded to bf16 before P V: |d out_tc| <= u sum_s p_ts |v_sc|; out rounded: u |out|.
//   lse:  fp32 only: (T + hd) 2^-22 (1 + |scores| + |lse|) covers both sides' fp32 sums and exp.
//   D = rowsum(dO * out) from the bf16 out: |dD_t| <= sum_c |dO_tc| |d out_tc|.
//   dV:   P^T rounded: u sum_t p_ts |dO_tc|;  dQ, dK: dS rounded: u sum |dS| |K| (|Q|) plus the
//         D error carried by dS = P (dP - D) scale: scale |dD_t| sum p |K| (|Q|);  outputs
//         rounded: u |ref|.
//   every sum also gets fp32 accumulation slack (T + hd) 2^-23 times its sum of |terms|.
// The forward's exp2 is ex2.approx on a GPU (2 ulp, far inside these bounds); the emulation
// computes exp2f. These are worst-case (triangle-inequality) bounds; the test prints how much of
// each it used.
// The reference GPU kernel has only the output roundings and its own D error; comparing the two
// GPU kernels allows the sum of both bounds.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"
#include "kernels/attention.cuh"
#include "kernels/attention_tc.cuh"
#include "kernels/rope.cuh"

namespace {

using bf = __nv_bfloat16;
using vt::cpu::AttnShape;
template <class T>
using DeviceBuffer = vt::gputest::RawDeviceBuffer<T>;

constexpr double kU = 1.0 / 256.0;  // one bf16 rounding (8 significant bits), relative

std::vector<float> random_bf16(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = vt::gputest::bf16_round(d(rng));
  return v;
}
std::vector<float> to_f32(const std::vector<bf>& v) { return vt::gputest::nv_bf16_to_f32(v); }

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};
struct Inputs {
  std::vector<float> q, k, v, dout;
};

// Per-element bounds of |got - exact| for one implementation (see the header comment).
struct Bounds {
  std::vector<double> out, lse, dq, dk, dv;
};

Bounds derive_bounds(const AttnShape& s, const Inputs& in, const Outputs& ref, float scale,
                     bool tensor_cores) {
  const int64_t B = s.B, T = s.T, H = s.H, Hkv = s.Hkv, hd = s.hd, W = s.window;
  const double slack = double(T + hd) * std::ldexp(1.0, -23);
  Bounds bd;
  bd.out.assign(ref.out.size(), 0.0);
  bd.lse.assign(ref.lse.size(), 0.0);
  bd.dq.assign(ref.dq.size(), 0.0);
  bd.dk.assign(ref.dk.size(), 0.0);
  bd.dv.assign(ref.dv.size(), 0.0);
  std::vector<double> p(static_cast<size_t>(T)), ds(static_cast<size_t>(T));
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * H + h) * hd; };
  auto ki = [&](int64_t b, int64_t t, int64_t g) { return ((b * T + t) * Hkv + g) * hd; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t lo = std::max<int64_t>(0, t - W + 1);
        const float* q = &in.q[size_t(qi(b, t, h))];
        const float* dO = &in.dout[size_t(qi(b, t, h))];
        // Exact softmax row, score magnitudes.
        double mx = -INFINITY, abs_score = 0;
        for (int64_t j = lo; j <= t; ++j) {
          const float* k = &in.k[size_t(ki(b, j, g))];
          double sc = 0, sa = 0;
          for (int64_t c = 0; c < hd; ++c) {
            sc += double(q[c]) * k[c];
            sa += std::fabs(double(q[c]) * k[c]);
          }
          p[size_t(j)] = sc * scale;
          mx = std::max(mx, p[size_t(j)]);
          abs_score = std::max(abs_score, sa * scale);
        }
        double l = 0;
        for (int64_t j = lo; j <= t; ++j) l += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        for (int64_t j = lo; j <= t; ++j) p[size_t(j)] /= l;
        const size_t lrow = size_t((b * H + h) * T + t);
        bd.lse[lrow] = double(T + hd) * std::ldexp(1.0, -22) *
                       (1.0 + abs_score + std::fabs(double(ref.lse[lrow])));
        // out: P rounding (tensor cores), output rounding, slack; the D error it causes.
        double dD = 0, D = 0;
        std::vector<double> out_err(static_cast<size_t>(hd));
        for (int64_t c = 0; c < hd; ++c) {
          double pv = 0, o = 0;
          for (int64_t j = lo; j <= t; ++j) {
            const double vj = in.v[size_t(ki(b, j, g) + c)];
            pv += p[size_t(j)] * std::fabs(vj);
            o += p[size_t(j)] * vj;
          }
          const size_t oi = size_t(qi(b, t, h) + c);
          out_err[size_t(c)] = (tensor_cores ? kU * pv : 0.0) + kU * std::fabs(o) + slack * pv;
          bd.out[oi] = out_err[size_t(c)];
          dD += std::fabs(double(dO[c])) * out_err[size_t(c)];
          D += double(dO[c]) * o;
        }
        dD += slack * std::fabs(D);
        // dS = P (dP - D) scale.
        for (int64_t j = lo; j <= t; ++j) {
          const float* v = &in.v[size_t(ki(b, j, g))];
          double dp = 0;
          for (int64_t c = 0; c < hd; ++c) dp += double(dO[c]) * v[c];
          ds[size_t(j)] = p[size_t(j)] * (dp - D) * scale;
        }
        for (int64_t c = 0; c < hd; ++c) {
          double rounding = 0, from_d = 0, terms = 0;
          for (int64_t j = lo; j <= t; ++j) {
            const double kc = std::fabs(double(in.k[size_t(ki(b, j, g) + c)]));
            rounding += std::fabs(ds[size_t(j)]) * kc;
            from_d += p[size_t(j)] * kc;
          }
          terms = rounding;
          bd.dq[size_t(qi(b, t, h) + c)] +=
              (tensor_cores ? kU * rounding : 0.0) + scale * dD * from_d + slack * terms;
        }
        for (int64_t j = lo; j <= t; ++j)
          for (int64_t c = 0; c < hd; ++c) {
            const double qc = std::fabs(double(q[c])), dc = std::fabs(double(dO[c]));
            const size_t kv = size_t(ki(b, j, g) + c);
            bd.dk[kv] += (tensor_cores ? kU : 0.0) * std::fabs(ds[size_t(j)]) * qc +
                         scale * p[size_t(j)] * dD * qc + slack * std::fabs(ds[size_t(j)]) * qc;
            bd.dv[kv] += (tensor_cores ? kU : 0.0) * p[size_t(j)] * dc + slack * p[size_t(j)] * dc;
          }
      }
    }
  for (size_t i = 0; i < bd.dq.size(); ++i) bd.dq[i] += kU * std::fabs(double(ref.dq[i]));
  for (size_t i = 0; i < bd.dk.size(); ++i) bd.dk[i] += kU * std::fabs(double(ref.dk[i]));
  for (size_t i = 0; i < bd.dv.size(); ++i) bd.dv[i] += kU * std::fabs(double(ref.dv[i]));
  return bd;
}

// Every element finite and |got - want| <= bound (+ the sum of a second bound when given).
// Returns the largest |got - want| / bound seen.
double expect_within(const std::vector<float>& got, const std::vector<float>& want,
                     const std::vector<double>& bound, const std::vector<double>* bound2,
                     const char* what) {
  EXPECT_EQ(got.size(), want.size());
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = bound[i] + (bound2 ? (*bound2)[i] : 0.0) + 1e-30;
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (!std::isfinite(got[i]) || err > tol) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                      << " (bound " << tol << ")";
    } else {
      worst = std::max(worst, err / tol);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements off";
  return worst;
}

Outputs cpu_ref(const AttnShape& s, const Inputs& in, float scale) {
  Outputs r;
  r.out.resize(in.q.size());
  r.lse.resize(size_t(s.B * s.H * s.T));
  r.dq.resize(in.q.size());
  r.dk.resize(in.k.size());
  r.dv.resize(in.v.size());
  vt::cpu::attention_forward<float>(in.q.data(), in.k.data(), in.v.data(), r.out.data(),
                                    r.lse.data(), s, scale);
  vt::cpu::attention_backward<float>(in.q.data(), in.k.data(), in.v.data(), r.out.data(),
                                     r.lse.data(), in.dout.data(), r.dq.data(), r.dk.data(),
                                     r.dv.data(), s, scale);
  return r;
}

// One GPU implementation (tensor cores or the reference kernel) on bf16 copies of the inputs,
// its backward fed with its own forward's out and lse, as in training.
Outputs gpu_run(const AttnShape& s, const Inputs& in, float scale, bool tensor_cores) {
  const auto h = [](const std::vector<float>& x) { return vt::gputest::to_nv_bf16(x); };
  DeviceBuffer<bf> q(h(in.q)), k(h(in.k)), v(h(in.v)), dout(h(in.dout));
  DeviceBuffer<bf> out(in.q.size()), dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  DeviceBuffer<float> lse(size_t(s.B * s.H * s.T));
  if (tensor_cores) {
    DeviceBuffer<char> ws(vt::cuda::attention_tc_backward_workspace_bytes(s));
    vt::cuda::attention_tc_forward(q.p, k.p, v.p, out.p, lse.p, s, scale, nullptr);
    vt::cuda::attention_tc_backward(q.p, k.p, v.p, out.p, lse.p, dout.p, dq.p, dk.p, dv.p, s,
                                    scale, ws.p, nullptr);
    VT_CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    DeviceBuffer<char> ws(vt::cuda::attention_backward_workspace_bytes(s));
    vt::cuda::attention_forward(q.p, k.p, v.p, out.p, lse.p, s, scale, nullptr);
    vt::cuda::attention_backward(q.p, k.p, v.p, out.p, lse.p, dout.p, dq.p, dk.p, dv.p, s, scale,
                                 ws.p, nullptr);
    VT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return {to_f32(out.get()), lse.get(), to_f32(dq.get()), to_f32(dk.get()), to_f32(dv.get())};
}

// The v1 kernels (attention_tc_forward_v1, attention_tc_backward_v1), the backward fed with the
// v1 forward's out and lse.
Outputs gpu_run_v1(const AttnShape& s, const Inputs& in, float scale) {
  const auto h = [](const std::vector<float>& x) { return vt::gputest::to_nv_bf16(x); };
  DeviceBuffer<bf> q(h(in.q)), k(h(in.k)), v(h(in.v)), dout(h(in.dout));
  DeviceBuffer<bf> out(in.q.size()), dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  DeviceBuffer<float> lse(size_t(s.B * s.H * s.T));
  DeviceBuffer<char> ws(vt::cuda::attention_tc_backward_workspace_bytes(s));
  vt::cuda::attention_tc_forward_v1(q.p, k.p, v.p, out.p, lse.p, s, scale, nullptr);
  vt::cuda::attention_tc_backward_v1(q.p, k.p, v.p, out.p, lse.p, dout.p, dq.p, dk.p, dv.p, s,
                                     scale, ws.p, nullptr);
  VT_CUDA_CHECK(cudaDeviceSynchronize());
  return {to_f32(out.get()), lse.get(), to_f32(dq.get()), to_f32(dk.get()), to_f32(dv.get())};
}

AttnShape mk(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, int64_t W) {
  AttnShape s;
  s.B = B, s.T = T, s.H = H, s.Hkv = Hkv, s.hd = hd, s.window = W;
  return s;
}

struct Case {
  AttnShape s;
  float q_std;  // 1: ordinary rows; 6: peaked softmax rows (scores of tens)
};

void check_case(const Case& cs, uint32_t seed) {
  const AttnShape& s = cs.s;
  SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " H=" << s.H
                                  << " Hkv=" << s.Hkv << " hd=" << s.hd << " W=" << s.window
                                  << " q_std=" << cs.q_std);
  const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
  const float scale = 1.0f / std::sqrt(float(s.hd));
  Inputs in{random_bf16(nq, seed, cs.q_std), random_bf16(nk, seed + 1, 1.0f),
            random_bf16(nk, seed + 2, 1.0f), random_bf16(nq, seed + 3, 1.0f)};
  const Outputs cpu = cpu_ref(s, in, scale);
  const Outputs tc = gpu_run(s, in, scale, true);
  const Outputs gref = gpu_run(s, in, scale, false);
  const Bounds btc = derive_bounds(s, in, cpu, scale, true);
  const Bounds bref = derive_bounds(s, in, cpu, scale, false);

  double used[5] = {
      expect_within(tc.out, cpu.out, btc.out, nullptr, "out vs CPU"),
      expect_within(tc.lse, cpu.lse, btc.lse, nullptr, "lse vs CPU"),
      expect_within(tc.dq, cpu.dq, btc.dq, nullptr, "dq vs CPU"),
      expect_within(tc.dk, cpu.dk, btc.dk, nullptr, "dk vs CPU"),
      expect_within(tc.dv, cpu.dv, btc.dv, nullptr, "dv vs CPU"),
  };
  const Outputs v1 = gpu_run_v1(s, in, scale);
  expect_within(v1.out, cpu.out, btc.out, nullptr, "v1 out vs CPU");
  expect_within(v1.lse, cpu.lse, btc.lse, nullptr, "v1 lse vs CPU");
  expect_within(v1.dq, cpu.dq, btc.dq, nullptr, "v1 dq vs CPU");
  expect_within(v1.dk, cpu.dk, btc.dk, nullptr, "v1 dk vs CPU");
  expect_within(v1.dv, cpu.dv, btc.dv, nullptr, "v1 dv vs CPU");
  expect_within(tc.out, gref.out, btc.out, &bref.out, "out vs reference kernel");
  expect_within(tc.lse, gref.lse, btc.lse, &bref.lse, "lse vs reference kernel");
  expect_within(tc.dq, gref.dq, btc.dq, &bref.dq, "dq vs reference kernel");
  expect_within(tc.dk, gref.dk, btc.dk, &bref.dk, "dk vs reference kernel");
  expect_within(tc.dv, gref.dv, btc.dv, &bref.dv, "dv vs reference kernel");
  std::printf("  hd %3ld T %3ld W %4ld H %ld/%ld q_std %g: largest |err| / bound vs CPU: out %.3f "
              "lse %.3f dq %.3f dk %.3f dv %.3f\n",
              long(s.hd), long(s.T), long(s.window), long(s.H), long(s.Hkv), double(cs.q_std),
              used[0], used[1], used[2], used[3], used[4]);
}

TEST(GpuAttentionTc, MatchesCpuAndReferenceKernel) {
  VT_SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {
      {mk(2, 100, 4, 2, 32, 100), 1.0f},  // full causal, GQA 2, T % 64 != 0
      {mk(1, 200, 4, 1, 64, 40), 1.0f},   // window < T skips whole key tiles, MQA
      {mk(1, 77, 2, 2, 128, 33), 1.0f},   // hd 128, window not a tile multiple
      {mk(1, 130, 2, 1, 128, 1), 1.0f},   // window 1: each query sees only itself
      {mk(1, 150, 2, 2, 64, 1000), 6.0f}, // window > T, peaked rows
      {mk(1, 5, 3, 1, 32, 2), 1.0f},      // T smaller than a tile
      {mk(1, 140, 4, 2, 128, 70), 6.0f},  // hd 128, GQA, window edge inside tiles, peaked
      {mk(2, 260, 2, 1, 128, 100), 1.0f}, // 5 key tiles, the first ones skipped by late rows
      // W = 64k - 1: a tile's last query is exactly W after the tile's first key, where the
      // kernels' "does this tile need a mask" tests would be off by one (both caught here).
      {mk(1, 150, 2, 1, 32, 63), 1.0f},
      {mk(1, 200, 2, 2, 128, 127), 1.0f},
      // --window-keys w+1 (nanochat's (W, 0) window): W + 1 = 64k + 1 keys, one past a tile.
      {mk(1, 200, 2, 1, 64, 129), 1.0f},
      // The forward's 128-query blocks (4 warps x 32 rows) and 32-key sub-tiles: three blocks,
      // the last partial (T % 128 and T % 64 != 0), diagonal sub-tiles a warp skips or masks;
      // T a multiple of 128; window edges one before (W = 32k - 1) and inside a sub-tile.
      {mk(1, 300, 2, 1, 128, 300), 1.0f},
      {mk(1, 256, 2, 2, 64, 256), 6.0f},
      {mk(1, 300, 2, 1, 128, 159), 1.0f},
      {mk(1, 260, 2, 1, 128, 95), 6.0f},
      {mk(1, 200, 4, 2, 32, 31), 1.0f},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    check_case(c, seed);
    seed += 10;
  }
}

// No atomics: two backward runs give bitwise identical gradients; the forward too.
TEST(GpuAttentionTc, IsDeterministic) {
  VT_SKIP_WITHOUT_CUDA();
  const AttnShape s = mk(1, 96, 4, 1, 64, 50);
  const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
  const float scale = 1.0f / std::sqrt(float(s.hd));
  Inputs in{random_bf16(nq, 7, 1.0f), random_bf16(nk, 8, 1.0f), random_bf16(nk, 9, 1.0f),
            random_bf16(nq, 10, 1.0f)};
  const Outputs a = gpu_run(s, in, scale, true), b = gpu_run(s, in, scale, true);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

// Non-finite inputs are never dropped: a NaN in one query row reaches that row's out, lse and dq
// and nothing else of them; with a NaN in that row of dO too, the dk and dv of every key the row
// sees are NaN. (Keys of the same 64-key tile that the row does not see may turn NaN as well: a
// masked zero times the row's NaN, as in the reference kernels; a tile that never meets the row,
// keys 64.., stays finite.)
TEST(GpuAttentionTc, NonFiniteInputsReachTheOutputs) {
  VT_SKIP_WITHOUT_CUDA();
  const AttnShape s = mk(1, 80, 2, 1, 64, 30);
  const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
  const float scale = 1.0f / std::sqrt(float(s.hd));
  Inputs in{random_bf16(nq, 21, 1.0f), random_bf16(nk, 22, 1.0f), random_bf16(nk, 23, 1.0f),
            random_bf16(nq, 24, 1.0f)};
  const int64_t t = 50, h = 1;  // query row t of head h: sees keys 21..50
  in.q[size_t((t * s.H + h) * s.hd + 7)] = NAN;
  in.dout[size_t((t * s.H + h) * s.hd + 3)] = NAN;
  const Outputs o = gpu_run(s, in, scale, true);
  for (int64_t r = 0; r < s.T; ++r)
    for (int64_t hh = 0; hh < s.H; ++hh) {
      const bool bad_row = r == t && hh == h;
      const size_t oi = size_t((r * s.H + hh) * s.hd);
      EXPECT_EQ(std::isnan(o.out[oi]), bad_row) << "out row " << r << " head " << hh;
      EXPECT_EQ(std::isnan(o.lse[size_t(hh * s.T + r)]), bad_row) << "lse " << r << " " << hh;
      EXPECT_EQ(std::isnan(o.dq[oi]), bad_row) << "dq row " << r << " head " << hh;
    }
  for (int64_t key = 0; key < s.T; ++key) {
    if (key <= t && t - key < s.window) {
      EXPECT_TRUE(std::isnan(o.dk[size_t(key * s.hd)])) << "dk key " << key;
      EXPECT_TRUE(std::isnan(o.dv[size_t(key * s.hd)])) << "dv key " << key;
    } else if (key >= 64) {
      EXPECT_FALSE(std::isnan(o.dk[size_t(key * s.hd)])) << "dk key " << key;
      EXPECT_FALSE(std::isnan(o.dv[size_t(key * s.hd)])) << "dv key " << key;
    }
  }
}

// The RoPE + QK-norm epilogue of the dQ and dK kernels (RopeNormGrad, issue 29) gives the bits of
// the unfused pair it replaces: the plain backward, then rope_rmsnorm_backward_kernel on dq and
// dk (both bf16, both from the same staged bf16 gradient, the same per-row function). dv is the
// plain backward's. Head dims 32/64/128, GQA and MQA, T not a tile multiple, a position offset.
TEST(GpuAttentionTc, RopeNormEpilogueIsTheUnfusedPair) {
  VT_SKIP_WITHOUT_CUDA();
  struct C {
    AttnShape s;
    int64_t offset;
  };
  const std::vector<C> cases = {{mk(2, 100, 4, 2, 32, 100), 0},
                                {mk(1, 77, 2, 2, 128, 33), 0},
                                {mk(1, 150, 4, 1, 64, 70), 3},
                                {mk(1, 140, 4, 2, 128, 1000), 0}};
  uint32_t seed = 500;
  for (const C& c : cases) {
    const AttnShape& s = c.s;
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " H=" << s.H << "/" << s.Hkv
                                    << " hd=" << s.hd << " offset=" << c.offset);
    const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
    const float scale = 1.0f / std::sqrt(float(s.hd)), qk_scale = 1.3f;
    const auto h = [](const std::vector<float>& x) { return vt::gputest::to_nv_bf16(x); };
    DeviceBuffer<bf> xq(h(random_bf16(nq, seed, 1.5f))), xk(h(random_bf16(nk, seed + 1, 0.7f)));
    DeviceBuffer<bf> v(h(random_bf16(nk, seed + 2, 1.0f))), dout(h(random_bf16(nq, seed + 3, 1.0f)));
    seed += 10;
    DeviceBuffer<bf> q(nq), k(nk), out(nq);
    DeviceBuffer<float> rq(size_t(s.B * s.T * s.H)), rk(size_t(s.B * s.T * s.Hkv));
    DeviceBuffer<float> lse(size_t(s.B * s.H * s.T));
    DeviceBuffer<float2> table(size_t((s.T + c.offset) * s.hd / 2));
    DeviceBuffer<char> ws(vt::cuda::attention_tc_backward_workspace_bytes(s));
    vt::cuda::rope_table(table.p, s.T + c.offset, s.hd, 10000.0, nullptr);
    vt::cuda::rope_rmsnorm_forward(xq.p, q.p, rq.p, s.B, s.T, s.H, s.hd, table.p, c.offset,
                                   qk_scale, 1e-6f, nullptr);
    vt::cuda::rope_rmsnorm_forward(xk.p, k.p, rk.p, s.B, s.T, s.Hkv, s.hd, table.p, c.offset,
                                   qk_scale, 1e-6f, nullptr);
    vt::cuda::attention_tc_forward(q.p, k.p, v.p, out.p, lse.p, s, scale, nullptr);
    // Unfused: dq, dk of the normalized, rotated q, k, then back through the QK-norm and RoPE.
    DeviceBuffer<bf> dq(nq), dk(nk), dv(nk);
    vt::cuda::attention_tc_backward(q.p, k.p, v.p, out.p, lse.p, dout.p, dq.p, dk.p, dv.p, s,
                                    scale, ws.p, nullptr);
    const std::vector<float> plain_dq = to_f32(dq.get());
    vt::cuda::rope_rmsnorm_backward(xq.p, rq.p, dq.p, dq.p, s.B, s.T, s.H, s.hd, table.p,
                                    c.offset, qk_scale, nullptr);
    vt::cuda::rope_rmsnorm_backward(xk.p, rk.p, dk.p, dk.p, s.B, s.T, s.Hkv, s.hd, table.p,
                                    c.offset, qk_scale, nullptr);
    // Fused.
    DeviceBuffer<bf> fdq(nq), fdk(nk), fdv(nk);
    vt::cuda::RopeNormGrad rn;
    rn.q = {xq.p, rq.p};
    rn.k = {xk.p, rk.p};
    rn.table = table.p;
    rn.pos_offset = c.offset;
    rn.scale = qk_scale;
    vt::cuda::attention_tc_backward(q.p, k.p, v.p, out.p, lse.p, dout.p, fdq.p, fdk.p, fdv.p, s,
                                    scale, ws.p, nullptr, rn);
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> want_dq = to_f32(dq.get()), got_dq = to_f32(fdq.get());
    EXPECT_EQ(got_dq, want_dq);
    EXPECT_EQ(to_f32(fdk.get()), to_f32(dk.get()));
    EXPECT_EQ(to_f32(fdv.get()), to_f32(dv.get()));
    EXPECT_NE(got_dq, plain_dq);  // the epilogue ran
  }
}

TEST(GpuAttentionTc, SupportedHeadDims) {
  for (int64_t hd : {32, 64, 128}) EXPECT_TRUE(vt::cuda::attention_tc_supported(mk(1, 8, 1, 1, hd, 8)));
  for (int64_t hd : {8, 16, 24, 48, 96, 256})
    EXPECT_FALSE(vt::cuda::attention_tc_supported(mk(1, 8, 1, 1, hd, 8)));
}

}  // namespace
