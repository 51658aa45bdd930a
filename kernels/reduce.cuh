// Reductions on the GPU for the gradient norm: sum of squares (and dot products for scalar
// gradients) accumulated in fp64, deterministic (fixed grid, fixed combine order). Device
// pointers; the result stays on the device so no sync is forced.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// Blocks of the first pass (at most; 8 x 256 threads per SM of an H100's 132 fill it in one
// wave, a fixed number for every GPU so sums do not depend on the device).
inline constexpr int kReduceBlocks = 1024;
// The device scratch a reduction needs: kReduceBlocks fp64 partials, then one word whose low 32
// bits count the blocks that have written theirs. That word must be zero before the first call
// (cudaMemset the scratch once); each call leaves it zero again.
inline constexpr int kReduceScratch = kReduceBlocks + 1;

// *out (= or += when accumulate) = sum_i x[i]^2, in fp64, in one launch: each block writes its
// partial sum, and the last block to finish adds the partials in block order (deterministic).
// partials: kReduceScratch doubles of device scratch, as above. Several calls with accumulate
// sum the squares of several tensors.
void sum_squares(const float* x, int64_t n, double* partials, double* out, bool accumulate,
                 cudaStream_t stream);
void sum_squares(const __nv_bfloat16* x, int64_t n, double* partials, double* out,
                 bool accumulate, cudaStream_t stream);
// *out (= or +=) = sum_i x[i] * y[i], in fp64.
void dot(const float* x, const float* y, int64_t n, double* partials, double* out,
         bool accumulate, cudaStream_t stream);
// bf16 inputs (each widened to fp32, exactly, then the product formed in fp64).
void dot(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, double* partials,
         double* out, bool accumulate, cudaStream_t stream);

// Segmented sums of squares: out[s] = sum_i x[s * n + i]^2 for s in [0, segments), each segment
// reduced exactly as sum_squares reduces n elements alone (the same blocks, chunks and combine
// order: the same bits), in two launches for all segments. partials: segments *
// segment_partials() doubles of device scratch (no counter: a second launch combines).
int64_t segment_partials(int64_t n);
void sum_squares_segments(const float* x, int64_t n, int64_t segments, double* partials,
                          double* out, cudaStream_t stream);

}  // namespace vt::cuda
