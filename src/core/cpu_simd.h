// Portable SIMD helpers for the CPU kernels (GCC/Clang vector extensions, so the compiler picks
// SSE, AVX2 or AVX-512 for the target): 8-lane float vectors, loads/stores, and vectorized
// exp and tanh in float precision (exp: a degree-6 polynomial after range reduction, about 1 ulp,
// inputs below -87 flush towards 0; tanh from exp, absolute error ~1e-7). NaN in, NaN out: every
// clamp is written so that a NaN compares false and passes through (a diverged run must show
// NaN, never a plausible number).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

namespace vt::cpu::simd {

using f8 = float __attribute__((vector_size(32)));
using i8 = int32_t __attribute__((vector_size(32)));
constexpr int kLanes = 8;

inline f8 splat(float a) { return f8{} + a; }
inline f8 load(const float* p) {
  f8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, f8 v) { std::memcpy(p, &v, sizeof v); }
inline float hsum(f8 v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
// Maxima that propagate NaN (a NaN lane wins), unlike std::max.
inline float hmax(f8 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = (m != m || m > v[i]) ? m : v[i];
  return m;
}
inline f8 vmax(f8 a, f8 b) { return (a != a) | (a > b) ? a : b; }

// exp on any float vector type V with its int32 vector type VI.
template <class V, class VI>
inline V vexp(V x) {
  x = x < -87.0f ? V{} - 87.0f : x;  // NaN compares false: kept
  x = x > 88.0f ? V{} + 88.0f : x;
  const V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  const V r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V e = p * r * r + r + 1.0f;
  const VI two_n = (__builtin_convertvector(n, VI) + 127) << 23;
  return e * std::bit_cast<V>(two_n);
}

inline f8 exp(f8 x) { return vexp<f8, i8>(x); }

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|).
inline f8 tanh(f8 x) {
  const f8 ax = x < 0.0f ? -x : x;
  const f8 e = exp(ax * -2.0f);
  const f8 t = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}

}  // namespace vt::cpu::simd
