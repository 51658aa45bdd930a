// One head vector's RoPE + QK-norm backward, computed by one warp (device code only): the body of
// rope_rmsnorm_backward_kernel (kernels/rope.cu) and of the tensor-core attention backward's
// epilogue (kernels/attention_tc.cu), which folds it into the dQ and dK kernels so the rotated,
// normalized gradients never go through memory. One function, so both give the same bits.
//
// x: the saved pre-RoPE head vector (2 * half elements, rotate-half pairing j <-> j + half);
// rs: its rstd; cs: the (cos, sin) row of its position in the rope table; dy(j) reads the
// gradient of the normalized, rotated vector at element j; dx(j, v) writes the gradient of x.
// Lane l handles pairs l, l + 32, ... (kPer of them: half <= 32 * kPer). dx may overwrite dy's
// storage: every dy is read before the first dx is written, and each lane writes only the
// elements it read.
#pragma once
#include <cstdint>

#include "kernels/block_reduce.cuh"

namespace vt::cuda::detail {

template <int kPer, class TX, class ReadDy, class WriteDx>
__device__ __forceinline__ void rope_rmsnorm_backward_row(const TX* x, float rs,
                                                          const float2* cs, int64_t half,
                                                          float scale, ReadDy dy, WriteDx dx) {
  const int lane = threadIdx.x & 31;
  float xa[kPer], xb[kPer], ga[kPer], gb[kPer];
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t j = lane + 32 * i;
    xa[i] = xb[i] = ga[i] = gb[i] = 0.0f;
    if (j < half) {
      const float2 c = cs[j];
      const float da = dy(j), db = dy(j + half);
      xa[i] = to_f32(x[j]);
      xb[i] = to_f32(x[j + half]);
      ga[i] = da * c.x + db * c.y;  // g = R^T dy
      gb[i] = db * c.x - da * c.y;
      dot += ga[i] * xa[i] + gb[i] * xb[i];
    }
  }
  dot = warp_sum(dot);
  const float A = scale * rs;
  const float Bc = rs * rs * dot / static_cast<float>(2 * half);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < half) {
      dx(j, A * (ga[i] - xa[i] * Bc));
      dx(j + half, A * (gb[i] - xb[i] * Bc));
    }
  }
}

}  // namespace vt::cuda::detail
