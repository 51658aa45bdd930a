// Casts between fp32 and bf16 on the GPU (round to nearest even), e.g. fp32 master weights to
// the bf16 copies GEMMs read, and bf16 gradients to fp32. Device pointers.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

void cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);

}  // namespace vt::cuda
