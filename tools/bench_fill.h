// Random bf16 inputs on the device for the kernel-only benchmarks (tools/attention_bench.cc,
// tools/gemm_bench.cc): n standard-normal values from a seeded generator, copied to `d`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda_check.cuh"

namespace vt::bench {

// At most 4M values are drawn and tiled over the rest: the lm head's 2 GiB operands drawn whole
// on the host took over a minute (the first GPU window's gemm stage timed out there, 2026-11-26);
// GEMM and attention timings do not depend on the values repeating.
inline void fill_random_bf16(__nv_bfloat16* d, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<__nv_bfloat16> h(std::min<size_t>(n, size_t(1) << 22));
  for (auto& x : h) x = __float2bfloat16(nd(rng));
  for (size_t at = 0; at < n; at += h.size()) {
    const size_t count = std::min(h.size(), n - at);
    VT_CUDA_CHECK(cudaMemcpy(d + at, h.data(), count * sizeof(__nv_bfloat16),
                             cudaMemcpyHostToDevice));
  }
}

}  // namespace vt::bench
