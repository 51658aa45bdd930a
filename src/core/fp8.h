// FP8 numerics in one place: the two formats of the FP8 formats paper (Micikevicius et al. 2022,
// "FP8 Formats for Deep Learning"; OCP OFP8): E4M3 (bias 7, no infinities, max 448, NaN
// S.1111.111) and E5M2 (bias 15, IEEE-like, max 57344), rounding to nearest even, saturating to
// the largest finite value (cuda_fp8.h's __NV_SATFINITE: what the GPU's cvt.rn.satfinite does),
// NaN kept; and the per-tensor scale chosen from an amax.
//
// The scale is a power of two: the largest 2^k with amax * 2^k <= the format's max (torchao's
// round_scales_to_power_of_2 option; Transformer Engine uses max / amax unrounded). A power of
// two makes x * scale and the dequantization (times 2^-k) exact, so quantization error is the
// FP8 rounding alone, the CPU's fake quantization and the GPU's real one see the same values,
// and the scale costs at most one binade of the format's range. A non-finite amax gives a NaN
// scale (every quantized value NaN, caught by the trainer's non-finite policy, never silently
// saturated); amax 0 gives scale 1.
//
// Host and device: fp8_scale is also called by kernels/fp8.cu (nvcc and the emulation).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define VT_FP8_HD __host__ __device__
#else
#define VT_FP8_HD
#endif

namespace vt {

enum class Fp8Format : uint8_t { kNone, kE4M3, kE5M2 };

inline const char* fp8_format_name(Fp8Format f) {
  switch (f) {
    case Fp8Format::kE4M3: return "e4m3";
    case Fp8Format::kE5M2: return "e5m2";
    default: return "none";
  }
}

// Largest finite value: 1.75 * 2^8 and 1.75 * 2^15.
VT_FP8_HD inline float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

// The power-of-two scale for a tensor whose largest magnitude is amax (see the top).
VT_FP8_HD inline float fp8_scale(float amax, Fp8Format f) {
  if (!(amax <= 3.4028235e38f)) return NAN;  // inf or NaN (amax is >= 0)
  if (amax == 0.0f) return 1.0f;
  // max = 1.75 * 2^emax; amax = frac * 2^e, frac in [0.5, 1): amax * 2^k <= max for
  // k = emax - (e - 1) when frac * 2 <= 1.75, one less otherwise.
  const int emax = f == Fp8Format::kE4M3 ? 8 : 15;
  int e = 0;
  const float frac = frexpf(amax, &e);
  int k = emax - (e - 1) - (frac > 0.875f ? 1 : 0);
  k = k < -126 ? -126 : (k > 127 ? 127 : k);  // a normal fp32
  return ldexpf(1.0f, k);
}

namespace fp8_detail {
struct Spec {
  int mbits, bias;
  float max;
  uint8_t max_code, nan_code;
};
inline Spec spec(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? Spec{3, 7, 448.0f, 0x7e, 0x7f} : Spec{2, 15, 57344.0f, 0x7b, 0x7e};
}
}  // namespace fp8_detail

// x rounded to the format's grid (nearest, ties to even; |x| beyond max -> +-max; NaN -> NaN),
// as the fp32 value the FP8 code stands for.
inline float fp8_round(float x, Fp8Format f) {
  const fp8_detail::Spec s = fp8_detail::spec(f);
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a >= s.max) return std::copysign(s.max, x);
  if (a == 0.0f) return x;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, 1 - s.bias);  // subnormals share the smallest normal's quantum
  const float quantum = std::ldexp(1.0f, exp - s.mbits);
  // a / quantum is exact (a power of two); rint rounds to nearest even in the default mode.
  const float r = std::rint(a / quantum) * quantum;
  return std::copysign(std::fmin(r, s.max), x);
}

// The FP8 code of x (rounded as fp8_round).
inline uint8_t fp8_encode(float x, Fp8Format f) {
  const fp8_detail::Spec s = fp8_detail::spec(f);
  if (std::isnan(x)) return s.nan_code;
  const float v = fp8_round(x, f);
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const float a = std::fabs(v);
  const float min_normal = std::ldexp(1.0f, 1 - s.bias);
  if (a < min_normal)  // subnormal (or zero): the code is the count of quanta
    return sign | uint8_t(a / std::ldexp(1.0f, 1 - s.bias - s.mbits));
  int e = 0;
  const float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  const int mant = int((frac * 2.0f - 1.0f) * float(1 << s.mbits));
  return sign | uint8_t(((e - 1 + s.bias) << s.mbits) | mant);
}

// The value of an FP8 code (exact in fp32).
inline float fp8_decode(uint8_t code, Fp8Format f) {
  const fp8_detail::Spec s = fp8_detail::spec(f);
  const bool neg = code & 0x80;
  const int e = (code & 0x7f) >> s.mbits, m = code & ((1 << s.mbits) - 1);
  float v;
  if (f == Fp8Format::kE4M3 && (code & 0x7f) == 0x7f) {
    v = NAN;
  } else if (f == Fp8Format::kE5M2 && e == 31) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    v = std::ldexp(float(m), 1 - s.bias - s.mbits);
  } else {
    v = std::ldexp(1.0f + float(m) / float(1 << s.mbits), e - s.bias);
  }
  return neg ? -v : v;
}

}  // namespace vt
