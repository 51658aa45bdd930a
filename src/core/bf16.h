// bf16 on the host: conversion to and from fp32 with round-to-nearest-even (the rounding of
// __float2bfloat16_rn on the GPU), so CPU code can read, write and emulate bf16 tensors.
#pragma once
#include <cstdint>
#include <cstring>

namespace vt {

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The fp32 value nearest to x that a bf16 can hold.
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

}  // namespace vt
