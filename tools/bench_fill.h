// Random bf16 inputs on the device for the kernel-only benchmarks (tools/attention_bench.cc,
// tools/gemm_bench.cc): n standard-normal values from a seeded generator, copied to `d`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda_check.cuh"

namespace vt::bench {

inline void fill_random_bf16(__nv_bfloat16* d, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<__nv_bfloat16> h(n);
  for (auto& x : h) x = __float2bfloat16(nd(rng));
  VT_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
}

}  // namespace vt::bench
