// Small elementwise / data-movement kernels of the CUDA backend (src/core/cuda_backend.cc) that
// belong to no model-op family: a scalar add, a matrix transpose and the in-place scaling of a
// strided matrix (the K = 0 corner of the GEMM). Device pointers; every launcher enqueues on
// `stream` and returns. (y += alpha x and y = alpha x are value_axpy / value_mix2 of
// value_mix.cuh; the fp64 dot products and sums of squares are in reduce.cuh.)
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// t[index] += value (one element, fp32): scalar-parameter gradients without a host round trip.
void add_scalar(float* t, int64_t index, float value, cudaStream_t stream);

// y (cols, rows) = x (rows, cols)^T, both contiguous row-major. A bit-exact copy of the
// elements (32x32 tiles through shared memory). y must not overlap x.
void transpose(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
// `batch` (<= 65535) rows x cols matrices one after another, each transposed in place of its
// slot in y (one launch).
void transpose_batched(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols,
                       cudaStream_t stream);
void transpose(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
               cudaStream_t stream);
void transpose(const int32_t* x, int32_t* y, int64_t rows, int64_t cols, cudaStream_t stream);

// c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j] for i < M, j < N (what a GEMM with
// K = 0 leaves in C; beta == 0 writes zeros without reading, so NaNs in C do not survive).
void scale_matrix(float* c, int64_t M, int64_t N, int64_t ldc, float beta, cudaStream_t stream);
void scale_matrix(__nv_bfloat16* c, int64_t M, int64_t N, int64_t ldc, float beta,
                  cudaStream_t stream);

// Coefficients read from device memory (a scalar parameter), so no host round trip:
// y = coef[0] * x;  y += coef[0] * x  (fp32 math; coef points at the element to use).
void scale_copy_coef(const float* x, float* y, int64_t n, const float* coef, cudaStream_t stream);
void scale_copy_coef(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, const float* coef,
                     cudaStream_t stream);
void axpy_coef(const float* x, float* y, int64_t n, const float* coef, cudaStream_t stream);
void axpy_coef(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n, const float* coef,
               cudaStream_t stream);
// *dst = float(*src) (a reduction's fp64 result stored into an fp32 tensor element).
void double_to_float(const double* src, float* dst, cudaStream_t stream);
// x = x / (sqrt(*sumsq) * scale + eps), the division in double and rounded once.
void div_by_norm(float* x, int64_t n, const double* sumsq, double scale, double eps,
                 cudaStream_t stream);
void div_by_norm(__nv_bfloat16* x, int64_t n, const double* sumsq, double scale, double eps,
                 cudaStream_t stream);
// y = bf16(float(x / d)), d as div_by_norm's: its f32 quotient rounded to bf16 as the cast kernel
// rounds (nearest even), x not written.
void div_by_norm_to(const float* x, __nv_bfloat16* y, int64_t n, const double* sumsq, double scale,
                    double eps, cudaStream_t stream);
// Segmented: segment s (elements [s n, (s + 1) n)) divided by its own norm from sumsq[s],
// each element as div_by_norm / div_by_norm_to compute it. y may be x (f32 only).
void div_by_norm_segments(const float* x, float* y, int64_t n, int64_t segments,
                          const double* sumsq, double scale, double eps, cudaStream_t stream);
void div_by_norm_segments(const float* x, __nv_bfloat16* y, int64_t n, int64_t segments,
                          const double* sumsq, double scale, double eps, cudaStream_t stream);
}  // namespace vt::cuda
