// The GEMM op family: C(M,N) = alpha * op(A) * op(B) + beta * C, row-major with leading
// dimensions (the semantics of vt::cpu::gemm), or + beta * addend with C written only (cuBLASLt's
// D = alpha op(A) op(B) + beta C with C != D), and the matmuls the model calls. Host: OpenBLAS
// (cpu::gemm); CUDA: cuBLASLt (core/cuda_gemm.h, its handle owned by the CUDA runtime), with
// kernels/elementwise.cu's scale_matrix for K = 0.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt {

// A, B, C are base tensors (their data pointers plus *_offset elements); dtypes: all f32, or A
// and B bf16 with C bf16 or f32 (fp32 accumulation).
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  Tensor A, B, C;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // When defined: the beta term reads this matrix (C's dtype, device, number of elements and
  // layout, ldc) instead of C, which is then only written: C = alpha op(A) op(B) + beta addend. The same bits as copying
  // addend into C first; on a GPU it saves that copy's pass. It may not overlap C.
  Tensor addend;
  // Strided batch: `batch` independent GEMMs of these dimensions, problem i reading A at
  // i * stride_a elements, B at i * stride_b and writing C (and reading the addend) at
  // i * stride_c (cuBLASLt's BATCH_COUNT / STRIDED_BATCH_OFFSET). Each problem is computed
  // exactly as the unbatched call on its matrices (the host loops over them; cuBLASLt's batched
  // kernel, like the emulation, computes each problem alone). Batches of C may not overlap.
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

namespace ops {

// y (M,N) = x (M,K) @ w (K,N), or += when accumulate.
void matmul(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate = false);
// dx (M,K) = dy (M,N) @ w^T, or += when accumulate.
void matmul_dx(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate);
// dw (K,N) += x^T (K,M) @ dy (M,N).
void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw);
// The general GEMM (row-major, leading dimensions; see GemmArgs).
void gemm(const GemmArgs& g);

}  // namespace ops
}  // namespace vt
