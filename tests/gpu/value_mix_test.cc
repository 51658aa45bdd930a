// CUDA value-path mixing against the CPU formulas of src/model/value_mix.cc (written out here
// as host loops, since value_mix_forward needs a whole model config): linear mixes, the dense
// accumulation, the value-embed gate and gated mix, and the gated mix's backward.
#include "kernels/value_mix.cuh"

#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

constexpr int64_t Nr = 41, Hk = 3, hd = 64, n = Nr * Hk * hd;

// fp32: a*x + b*y may be one FMA on the GPU and two roundings on the CPU: a few ulp of the terms
// (rtol 1e-6, atol 1e-6 for cancellation). bf16: one rounding of the output (kBf16Rtol).
TEST(GpuValueMix, LinearMixesMatchCpu) {
  VT_SKIP_WITHOUT_CUDA();
  auto x = randn(n, 61), y = randn(n, 62), v0 = randn(n, 63);
  const float a = 0.7f, b = -1.3f;
  std::vector<float> mix(n), scale(n), axpy = v0;
  for (int64_t i = 0; i < n; ++i) {
    mix[i] = a * x[i] + b * y[i];
    scale[i] = a * x[i];
    axpy[i] += a * x[i];
  }
  DeviceBuffer<float> dX(x), dY(y), dV(n), dS(n), dA(v0);
  cuda::value_mix2(a, dX.get(), b, dY.get(), dV.get(), n, nullptr);
  cuda::value_mix2(a, dX.get(), 0.0f, nullptr, dS.get(), n, nullptr);
  cuda::value_axpy(a, dX.get(), dA.get(), n, nullptr);
  EXPECT_TRUE(all_close(dV.download(), mix, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(dS.download(), scale, 1e-6, 0.0));
  EXPECT_TRUE(all_close(dA.download(), axpy, 1e-6, 1e-6));

  auto xb = rounded_bf16(x), yb = rounded_bf16(y), vb = rounded_bf16(v0);
  std::vector<float> mixb(n), axpyb = vb;
  for (int64_t i = 0; i < n; ++i) {
    mixb[i] = a * xb[i] + b * yb[i];
    axpyb[i] += a * xb[i];
  }
  DeviceBuffer<__nv_bfloat16> dXb(to_bf16(xb)), dYb(to_bf16(yb)), dVb(n), dAb(to_bf16(vb));
  cuda::value_mix2(a, dXb.get(), b, dYb.get(), dVb.get(), n, nullptr);
  cuda::value_axpy(a, dXb.get(), dAb.get(), n, nullptr);
  EXPECT_TRUE(all_close(from_bf16(dVb.download<uint16_t>()), mixb, kBf16Rtol, 1e-6));
  EXPECT_TRUE(all_close(from_bf16(dAb.download<uint16_t>()), axpyb, kBf16Rtol, 1e-6));
}

// Gate = 3 * sigmoid(z): GPU expf within 2 ulp, so rtol 1e-6. Gated mix as the linear mixes.
// Backward: demb one product (rtol 1e-6); dgate an fp32 sum of hd = 64 products in the same
// order on both sides, FMA differences only: rtol 1e-5, atol 1e-5.
TEST(GpuValueMix, GatedMixForwardBackwardMatchCpu) {
  VT_SKIP_WITHOUT_CUDA();
  auto z = randn(Nr * Hk, 64, 2.0f), ctx = randn(n, 65), emb = randn(n, 66), dv = randn(n, 67);
  const float gs = 3.0f;
  std::vector<float> gate(Nr * Hk), v(n), demb(n), dgate(Nr * Hk, 0.0f);
  for (int64_t i = 0; i < Nr * Hk; ++i) gate[i] = gs / (1.0f + std::exp(-z[i]));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = ctx[i] + gate[i / hd] * emb[i];
    demb[i] = gate[i / hd] * dv[i];
    dgate[i / hd] += dv[i] * emb[i];
  }
  DeviceBuffer<float> dZ(z), dCtx(ctx), dEmb(emb), dV(n), dDV(dv), dDEmb(n), dDG(Nr * Hk);
  cuda::value_gate_sigmoid(dZ.get(), Nr * Hk, gs, nullptr);
  // Use the CPU gate for the mixes so the gate's own error is not counted twice.
  DeviceBuffer<float> dGate(gate);
  cuda::value_gated_mix(dCtx.get(), dEmb.get(), dGate.get(), dV.get(), Nr, Hk, hd, nullptr);
  cuda::value_gated_mix_backward(dDV.get(), dEmb.get(), dGate.get(), dDEmb.get(), dDG.get(), Nr,
                                 Hk, hd, nullptr);
  EXPECT_TRUE(all_close(dZ.download(), gate, 1e-6, 0.0));
  EXPECT_TRUE(all_close(dV.download(), v, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(dDEmb.download(), demb, 1e-6, 0.0));
  EXPECT_TRUE(all_close(dDG.download(), dgate, 1e-5, 1e-5));

  auto ctxb = rounded_bf16(ctx), embb = rounded_bf16(emb), dvb = rounded_bf16(dv);
  std::vector<float> vb(n), dembb(n), dgateb(Nr * Hk, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    vb[i] = ctxb[i] + gate[i / hd] * embb[i];
    dembb[i] = gate[i / hd] * dvb[i];
    dgateb[i / hd] += dvb[i] * embb[i];
  }
  DeviceBuffer<__nv_bfloat16> dCb(to_bf16(ctxb)), dEb(to_bf16(embb)), dVb(n),
      dDVb(to_bf16(dvb)), dDEb(n);
  cuda::value_gated_mix(dCb.get(), dEb.get(), dGate.get(), dVb.get(), Nr, Hk, hd, nullptr);
  cuda::value_gated_mix_backward(dDVb.get(), dEb.get(), dGate.get(), dDEb.get(), dDG.get(), Nr,
                                 Hk, hd, nullptr);
  EXPECT_TRUE(all_close(from_bf16(dVb.download<uint16_t>()), vb, kBf16Rtol, 1e-6));
  EXPECT_TRUE(all_close(from_bf16(dDEb.download<uint16_t>()), dembb, kBf16Rtol, 0.0));
  EXPECT_TRUE(all_close(dDG.download(), dgateb, 1e-5, 1e-5));  // fp32 output
}

}  // namespace
}  // namespace vt::gputest
