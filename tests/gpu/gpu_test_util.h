// Helpers for the GPU tests: the skip when no CUDA device is present, device buffers, random
// inputs, host bf16 rounding (round to nearest even, like __float2bfloat16_rn) and a
// per-element |gpu - ref| <= atol + rtol * |ref| comparison that reports the worst element.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "core/bf16.h"
#include "kernels/cuda_check.cuh"

#define VT_SKIP_WITHOUT_CUDA()                                             \
  do {                                                                     \
    if (::vt::cuda::cuda_device_count() == 0)                              \
      GTEST_SKIP() << "no CUDA device: GPU test skipped";                  \
  } while (0)

namespace vt::gputest {

// bf16 has 8 significant bits: one round-to-nearest costs at most 2^-9 relative; tests allow
// 2^-8 (~3.9e-3) per rounding of an output to leave room for fp32 compute differences.
inline constexpr double kBf16Rtol = 1.0 / 256.0;

inline uint16_t bf16_bits(float f) { return ::vt::f32_to_bf16(f); }
inline float bf16_to_float(uint16_t b) { return ::vt::bf16_to_f32(b); }
inline float bf16_round(float f) { return bf16_to_float(bf16_bits(f)); }

// Host copies of bf16 data are std::vector<uint16_t> (raw bits).
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_bits(x[i]);
  return r;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_float(x[i]);
  return r;
}
// x rounded to bf16 in place; returns x for chaining.
inline std::vector<float> rounded_bf16(std::vector<float> x) {
  for (auto& v : x) v = bf16_round(v);
  return x;
}

inline std::vector<float> randn(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> r(n);
  for (auto& v : r) v = d(g);
  return r;
}
inline std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> r(n);
  for (auto& v : r) v = d(g);
  return r;
}

// Device array of n elements of T (T = float, double, int32_t or __nv_bfloat16). Host data for
// __nv_bfloat16 is uint16_t bits.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), sizeof(T) * (n ? n : 1)));
  }
  template <class H>
  explicit DeviceBuffer(const std::vector<H>& host) : DeviceBuffer(host.size()) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class H>
  void upload(const std::vector<H>& host) {
    static_assert(sizeof(H) == sizeof(T));
    ASSERT_EQ(host.size(), n_);
    VT_CUDA_CHECK(cudaMemcpy(p_, host.data(), sizeof(T) * n_, cudaMemcpyHostToDevice));
  }
  template <class H = T>
  std::vector<H> download() const {
    static_assert(sizeof(H) == sizeof(T));
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<H> host(n_);
    VT_CUDA_CHECK(cudaMemcpy(host.data(), p_, sizeof(T) * n_, cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// The plain device array of the kernel-level tests: `p` is the device pointer, get() the host
// copy. Fresh memory is filled with 0xff bytes (NaN for floats) so unwritten outputs show.
template <class T>
struct RawDeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit RawDeviceBuffer(size_t count) : n(count) {
    VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * std::max<size_t>(n, 1)));
    VT_CUDA_CHECK(cudaMemset(p, 0xff, sizeof(T) * std::max<size_t>(n, 1)));
  }
  explicit RawDeviceBuffer(const std::vector<T>& h) : RawDeviceBuffer(h.size()) {
    VT_CUDA_CHECK(cudaMemcpy(p, h.data(), sizeof(T) * n, cudaMemcpyHostToDevice));
  }
  ~RawDeviceBuffer() { cudaFree(p); }
  RawDeviceBuffer(const RawDeviceBuffer&) = delete;
  RawDeviceBuffer& operator=(const RawDeviceBuffer&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    VT_CUDA_CHECK(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost));
    return h;
  }
};

// fp32 <-> __nv_bfloat16 host vectors (round to nearest even).
inline std::vector<__nv_bfloat16> to_nv_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __float2bfloat16(v[i]);
  return r;
}
inline std::vector<float> nv_bf16_to_f32(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __bfloat162float(v[i]);
  return r;
}

// Every |got - want| <= atol + rtol * |want|; on failure names the worst element.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, double rtol,
                                            double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double worst = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double excess = err - (atol + rtol * std::fabs(double(want[i])));
    if (!(excess <= 0.0) && (std::isnan(excess) || excess > worst || worst == 0.0)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      wi = i;
    }
  }
  if (worst > 0.0)
    return ::testing::AssertionFailure()
           << "element " << wi << ": got " << got[wi] << ", want " << want[wi] << " (rtol "
           << rtol << ", atol " << atol << ")";
  return ::testing::AssertionSuccess();
}

// Largest |x|, to scale absolute tolerances.
inline double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::fabs(double(v)));
  return m;
}

}  // namespace vt::gputest
