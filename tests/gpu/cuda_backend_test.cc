// The CUDA backend's runtime (src/core/cuda_runtime.cc) and what is particular to it, against
// the CPU backend where there is something to compare: allocation (zero fill, alignment,
// accounting, Tensor::empty), copies, copy_2d, the CUDA-event profile clock and the switch of
// attention kernels. Every op's CPU-vs-CUDA parity is one row of op_parity_test.cc. Skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/bf16.h"
#include "core/cuda_backend.h"
#include "core/cuda_runtime.h"
#include "core/op_profile.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "backend_pair.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

// The CUDA backend registered as the device backend for each test, removed afterwards.
class CudaBackendTest : public WithCudaBackend<::testing::Test> {
};

// ------------------------------------------------------------------------------------------------
// Memory and copies

// Tensor::empty skips the zero fill on the device: on the CUDA emulation, whose fresh memory is
// 0xff bytes (NaN), an empty tensor reads as NaN (on a GPU its contents are unspecified, not
// checked), and copies made through it (to, clone, dtype conversion: written in full before being
// read) are exact. A zero fill that such a copy needed would show as NaN here.
TEST_F(CudaBackendTest, EmptySkipsTheZeroFill) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (std::string(prop.name).find("emulation") != std::string::npos) {
    const Tensor e = Tensor::empty({100}, kF32, kGPU);
    for (float v : vals(e)) ASSERT_TRUE(std::isnan(v)) << "the emulation's fill, not zeros";
    const Tensor z = Tensor::zeros({100}, kF32, kGPU);
    for (float v : vals(z)) ASSERT_EQ(v, 0.0f);
  }
  const std::vector<float> x = randn(1000, 5);
  const Tensor h = host(x, {1000});
  const Tensor g = h.to(kGPU);             // host -> device through empty storage
  EXPECT_EQ(vals(g), x);
  EXPECT_EQ(vals(g.clone()), x);           // device -> device
  const Tensor gb = g.to(kGPU, kBF16);     // conversion on the device
  const Tensor hb = h.to(kCPU, kBF16);
  EXPECT_EQ(vals(gb), vals(hb));
  EXPECT_EQ(vals(gb.to(kGPU, kF32)), vals(hb.to(kCPU, kF32)));
}

TEST_F(CudaBackendTest, AllocIsZeroedAlignedAndTracked) {
  Backend& b = backend(kGPU);
  EXPECT_STREQ(b.name(), "cuda");
  const size_t base = b.bytes_in_use();
  b.reset_peak();
  EXPECT_EQ(b.peak_bytes(), base);
  const Tensor dirty = host(randn(1000, 1), {1000});
  {
    // 4000 bytes: Tensor::zeros and the backend round to 64 -> 4032; 20 bytes -> 64.
    Tensor t = Tensor::zeros({1000}, kF32, kGPU);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
    EXPECT_EQ(b.bytes_in_use(), base + 4032);
    Tensor u = Tensor::zeros({10}, kBF16, kGPU);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u.raw()) % 64, 0u);
    EXPECT_EQ(b.bytes_in_use(), base + 4096);
    EXPECT_EQ(b.peak_bytes(), base + 4096);
    for (float v : vals(t)) ASSERT_EQ(v, 0.0f);
    for (float v : vals(u)) ASSERT_EQ(v, 0.0f);
    t.copy_from(dirty);
    t.zero_();  // fill_zero
    for (float v : vals(t)) ASSERT_EQ(v, 0.0f);
    t.copy_from(dirty);  // leave the block dirty for the reuse check below
  }
  EXPECT_EQ(b.bytes_in_use(), base);
  EXPECT_EQ(b.peak_bytes(), base + 4096);
  b.reset_peak();
  EXPECT_EQ(b.peak_bytes(), base);
  // The pool hands freed blocks out again: alloc must still return zeros.
  for (int i = 0; i < 3; ++i) {
    Tensor t = Tensor::zeros({1000}, kF32, kGPU);
    for (float v : vals(t)) ASSERT_EQ(v, 0.0f);
    t.copy_from(dirty);
  }
  // The raw interface.
  void* p = b.alloc(100);
  EXPECT_EQ(b.bytes_in_use(), base + 128);
  b.release(p);
  b.release(nullptr);
  EXPECT_EQ(b.bytes_in_use(), base);
}

TEST_F(CudaBackendTest, CopiesRoundTripExactly) {
  const auto x = randn(1237, 2);
  const Tensor h = host(x, {1237});
  const Tensor d = h.to(kGPU);  // host -> device
  EXPECT_EQ(d.device(), kGPU);
  const Tensor d2 = d.clone();  // device -> device
  EXPECT_EQ(vals(d2), x);       // device -> host
  EXPECT_EQ(d2.item(5), double(x[5]));
  // The host buffer of a host->device copy may be freed as soon as the copy returns.
  Tensor d3 = Tensor::zeros({1237}, kF32, kGPU);
  {
    std::vector<float> tmp = x;
    d3.copy_from(Tensor::view(tmp.data(), {1237}));
    std::fill(tmp.begin(), tmp.end(), -1.0f);
  }
  EXPECT_EQ(vals(d3), x);
  // bf16 both ways (Tensor::to converts on the source device: the GPU cast kernel here).
  const Tensor b = d.to(kGPU, kBF16);
  const Tensor bc = h.to(kCPU, kBF16);
  EXPECT_EQ(vals(b), vals(bc));
}

TEST_F(CudaBackendTest, Copy2dMatchesCpu) {
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(name_of(dt));
    Pair src = pair(randn(10 * 13, 3), {10, 13}, dt);
    Pair dst = pair(randn(12 * 17, 4), {12, 17}, dt);
    ops::copy_2d(dst.c, 3, 17, src.c, 2, 13, 8, 9);
    ops::copy_2d(dst.g, 3, 17, src.g, 2, 13, 8, 9);
    EXPECT_TRUE(same(dst));
  }
}

// ------------------------------------------------------------------------------------------------
// Profiling

// `--profile` on the GPU: the CUDA backend's events time each device op (core/op_profile.h), so a
// GEMM's profiled time covers its kernel, not just its launch, and the host clock is not used.
TEST_F(CudaBackendTest, ProfileClockTimesDeviceOpsWithEvents) {
  std::unique_ptr<op_profile::DeviceClock> clock = make_cuda_profile_clock(backend(kGPU));
  ASSERT_NE(clock, nullptr);
  Tensor a = Tensor::zeros({64, 64}, kF32, kGPU), b = Tensor::zeros({64, 64}, kF32, kGPU);
  Tensor c = Tensor::zeros({64, 64}, kF32, kGPU);
  backend(kGPU).synchronize();
  op_profile::reset();
  op_profile::set_device_clock(clock.get());
  op_profile::enable(true);
  for (int i = 0; i < 3; ++i) ops::matmul(a, b, c, false);
  op_profile::enable(false);
  const auto es = op_profile::entries();
  op_profile::set_device_clock(nullptr);
  op_profile::reset();
  ASSERT_EQ(es.size(), 1u);
  EXPECT_EQ(es[0].op, "gemm");
  EXPECT_EQ(es[0].calls, 3);
  EXPECT_GT(es[0].seconds, 0.0);
  EXPECT_DOUBLE_EQ(es[0].flops, 3 * 2.0 * 64 * 64 * 64);
}

// ------------------------------------------------------------------------------------------------
// Attention kernel choice (the runtime's setting)

// bf16 attention runs on the tensor-core kernels by default and on the reference kernels when
// switched: both within the attention row's bf16 tolerances (op_parity_test.cc) of the CPU, and not bitwise equal to each other
// (the tensor-core kernels round P and dS to bf16), which shows the switch takes effect; f32
// always runs the reference kernels (bitwise the same result either way). hd 24 is not a
// tensor-core head dim: it falls back to the reference kernels.
TEST_F(CudaBackendTest, AttentionKernelsSwitch) {
  CudaRuntime& rt = *backend(kGPU).cuda();
  const CudaAttentionKernels before = rt.attention_kernels();
  EXPECT_EQ(before, CudaAttentionKernels::kTensorCores) << "the default";
  uint64_t seed = 900;
  for (int64_t hd : {64, 24}) {
    for (DType dt : {kBF16, kF32}) {
      SCOPED_TRACE(testing::Message() << name_of(dt) << " hd " << hd);
      const int64_t B = 1, T = 90, H = 2, Hkv = 1, W = 50;
      const Shape qs = {B, T, H, hd}, ks = {B, T, Hkv, hd};
      const float scale = 1.0f / std::sqrt(float(hd));
      Pair q = pair(randn(B * T * H * hd, seed++), qs, dt);
      Pair k = pair(randn(B * T * Hkv * hd, seed++), ks, dt);
      Pair v = pair(randn(B * T * Hkv * hd, seed++), ks, dt);
      Pair dout = pair(randn(B * T * H * hd, seed++), qs, dt);
      std::vector<float> outs[2], dqs[2];
      for (int pass = 0; pass < 2; ++pass) {
        rt.set_attention_kernels(pass == 0 ? CudaAttentionKernels::kTensorCores
                                           : CudaAttentionKernels::kReference);
        Pair out = zeros(qs, dt), lse = zeros({B, H, T});
        ops::attention(q.c, k.c, v.c, out.c, lse.c, W, scale);
        ops::attention(q.g, k.g, v.g, out.g, lse.g, W, scale);
        const bool bf = dt == kBF16;
        expect_rel_norm(out, bf ? 1e-2 : 1e-5, "out");
        Pair dq = zeros(qs, dt), dk = zeros(ks, dt), dv = zeros(ks, dt);
        ops::attention_backward(q.c, k.c, v.c, out.c, lse.c, dout.c, dq.c, dk.c, dv.c, W, scale);
        ops::attention_backward(q.g, k.g, v.g, out.g, lse.g, dout.g, dq.g, dk.g, dv.g, W, scale);
        expect_rel_norm(dq, bf ? 3e-2 : 1e-4, "dq");
        expect_rel_norm(dk, bf ? 3e-2 : 1e-4, "dk");
        expect_rel_norm(dv, bf ? 3e-2 : 1e-4, "dv");
        outs[pass] = vals(out.g);
        dqs[pass] = vals(dq.g);
      }
      if (dt == kBF16 && hd == 64) {
        EXPECT_NE(outs[0], outs[1]) << "tensor cores and reference kernels gave identical bits";
        EXPECT_NE(dqs[0], dqs[1]);
      } else {
        EXPECT_EQ(outs[0], outs[1]) << "the reference kernels both times";
        EXPECT_EQ(dqs[0], dqs[1]);
      }
    }
  }
  rt.set_attention_kernels(before);
}

}  // namespace
}  // namespace vt::gputest
