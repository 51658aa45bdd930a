// RoPE kernels (see rope.cuh): one thread per rotated pair, grid-stride loop. The angle is
// computed in double (t * inv_freq can reach ~1e4 radians at long context, where an fp32
// product would lose ~1e-3 of phase) and its cos/sin rounded to fp32, like the CPU tables.
#include "kernels/rope.cuh"

#include <cmath>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

template <class T>
__global__ void rope_kernel(const T* x, T* y, int64_t pairs, int64_t T_len, int64_t heads,
                            int64_t half, double log2_base_over_half, int64_t pos_offset,
                            float sign) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % half;
    const int64_t row = i / half;             // (b, t, h) flattened
    const int64_t t = (row / heads) % T_len;  // row = (b * T + t) * heads + h
    // inv_freq_j = base^(-2j/hd) = 2^(-j * log2(base) / half)
    const double inv_freq = exp2(-static_cast<double>(j) * log2_base_over_half);
    const double angle = static_cast<double>(t + pos_offset) * inv_freq;
    const float c = static_cast<float>(cos(angle));
    const float s = sign * static_cast<float>(sin(angle));
    const int64_t o = row * 2 * half + j;
    const float a = to_f32(x[o]), b = to_f32(x[o + half]);
    y[o] = from_f32<T>(a * c - b * s);
    y[o + half] = from_f32<T>(b * c + a * s);
  }
}

template <class T>
void apply(const T* x, T* y, int64_t B, int64_t Tn, int64_t heads, int64_t hd, double base,
           int64_t pos_offset, float sign, cudaStream_t stream) {
  if (hd % 2 != 0) {
    cuda_fail(cudaErrorInvalidValue, "rope: head dim must be even", __FILE__, __LINE__);
  }
  const int64_t half = hd / 2, pairs = B * Tn * heads * half;
  if (pairs == 0) return;
  VT_LAUNCH(rope_kernel<T>, grid_for(pairs, kThreads), kThreads, 0, stream, x, y, pairs, Tn, heads,
            half, std::log2(base) / static_cast<double>(half), pos_offset, sign);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(const float* x, float* y, int64_t B, int64_t T, int64_t heads, int64_t hd,
                  double base, int64_t pos_offset, cudaStream_t stream) {
  apply(x, y, B, T, heads, hd, base, pos_offset, 1.0f, stream);
}
void rope_forward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t B, int64_t T, int64_t heads,
                  int64_t hd, double base, int64_t pos_offset, cudaStream_t stream) {
  apply(x, y, B, T, heads, hd, base, pos_offset, 1.0f, stream);
}
void rope_backward(const float* dy, float* dx, int64_t B, int64_t T, int64_t heads, int64_t hd,
                   double base, int64_t pos_offset, cudaStream_t stream) {
  apply(dy, dx, B, T, heads, hd, base, pos_offset, -1.0f, stream);
}
void rope_backward(const __nv_bfloat16* dy, __nv_bfloat16* dx, int64_t B, int64_t T,
                   int64_t heads, int64_t hd, double base, int64_t pos_offset,
                   cudaStream_t stream) {
  apply(dy, dx, B, T, heads, hd, base, pos_offset, -1.0f, stream);
}

}  // namespace vt::cuda
