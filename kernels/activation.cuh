// ReLU^2 and ReLU on the GPU; same semantics as vt::cpu::relu2_* / relu_*. f32 or bf16, fp32
// math.
// Device pointers; y may alias x.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// y = relu(x)^2.
void relu2_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
void relu2_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// dx (= or += when accumulate) = 2 * relu(x) * dy.
void relu2_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                    cudaStream_t stream);
void relu2_backward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t n,
                    bool accumulate, cudaStream_t stream);
// y = relu(x); dx (= or += when accumulate) = [x > 0] * dy (NaN x: NaN).
void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
void relu_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream);
void relu_backward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t n,
                   bool accumulate, cudaStream_t stream);

}  // namespace vt::cuda
