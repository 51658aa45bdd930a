// The CPU-vs-CUDA comparison helpers of the backend tests (op_parity_test.cc, cuda_backend_test.cc):
// a Pair holds the same values on the CPU and on the CUDA device, and close / same / rtol_for /
// expect_rel_norm compare the two sides (tolerance rationale: op_parity_test.cc).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "gpu_test_util.h"

namespace vt::gputest {

inline constexpr Device kCPU = Device::kCPU, kGPU = Device::kCUDA;
inline constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// A test with the CUDA backend registered as the device backend (skipped without CUDA), removed
// afterwards: Base is ::testing::Test or a TestWithParam.
template <class Base>
class WithCudaBackend : public Base {
 protected:
  void SetUp() override {
    VT_SKIP_WITHOUT_CUDA();
    set_device_backend(make_cuda_backend());
    ASSERT_TRUE(has_backend(kGPU));
  }
  void TearDown() override {
    if (has_backend(kGPU)) {
      backend(kGPU).synchronize();
      set_device_backend(nullptr);
    }
  }
};

// The same values on both devices.
struct Pair {
  Tensor c, g;  // CPU, GPU
};

inline Tensor host(const std::vector<float>& v, Shape s, DType dt = kF32) {
  Tensor t = Tensor::from_host(v.data(), std::move(s), kCPU);
  return dt == kF32 ? t : t.to(kCPU, dt);
}
inline Pair pair(const std::vector<float>& v, Shape s, DType dt = kF32) {
  Tensor c = host(v, std::move(s), dt);
  return {c, c.to(kGPU)};
}
inline Pair zeros(Shape s, DType dt = kF32) {
  return {Tensor::zeros(s, dt, kCPU), Tensor::zeros(s, dt, kGPU)};
}
inline Pair ids(const std::vector<int32_t>& v) {
  Tensor c = Tensor::from_host(v.data(), {int64_t(v.size())}, kCPU);
  return {c, c.to(kGPU)};
}

inline std::vector<float> vals(const Tensor& t) { return t.to_host_f32(); }

inline ::testing::AssertionResult close(const Pair& p, double rtol, double atol) {
  return all_close(vals(p.g), vals(p.c), rtol, atol);
}
// Equal values (infinities included; no NaNs expected).
inline ::testing::AssertionResult same(const Pair& p) {
  const auto got = vals(p.g), want = vals(p.c);
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

// The f32 tolerance, widened by one bf16 rounding for bf16 outputs.
inline double rtol_for(DType dt, double f32_rtol) { return dt == kBF16 ? f32_rtol + kBf16Rtol : f32_rtol; }

// ||got - want|| / ||want|| <= tol (for attention, whose bf16 kernels round tiles internally).
inline void expect_rel_norm(const Pair& p, double tol, const char* what) {
  const auto got = vals(p.g), want = vals(p.c);
  ASSERT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), tol) << what;
}

inline const char* name_of(DType dt) { return dtype_name(dt); }

}  // namespace vt::gputest
