// GEMM on the GPU through cuBLASLt, with the row-major semantics of vt::cpu::gemm:
//   C(M,N) = alpha * op(A) * op(B) + beta * C,  op(A) (M,K), op(B) (K,N),
//   A stored (M,K) with leading dim lda, or (K,M) when trans_a; same for B; C (M,N), ldc.
// Row-major C is column-major C^T = op(B)^T op(A)^T, so the call to cuBLASLt swaps the operands
// (A' = B, B' = A, m = N, n = M) and keeps each operand's transpose flag.
//
// Types: fp32 A/B/C (pure fp32 compute, CUBLAS_COMPUTE_32F, no TF32: used by the tests), and
// bf16 A/B with fp32 accumulation writing bf16 or fp32 C. alpha and beta are fp32.
// The Gemm object owns the cuBLASLt handle and a device workspace; calls enqueue on `stream`.
// One Gemm per thread (the workspace is shared by its calls, which must be on one stream or
// otherwise ordered).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace vt::cuda {

class Gemm {
 public:
  // 32 MiB: what NVIDIA recommends for cuBLASLt on Hopper.
  explicit Gemm(size_t workspace_bytes = size_t(32) << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, cudaStream_t stream);
  void operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                  float beta, __nv_bfloat16* C, int64_t ldc, cudaStream_t stream);
  void operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, cudaStream_t stream);

 private:
  void matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
              int64_t ldc, cudaDataType_t ab_type, cudaDataType_t c_type, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace vt::cuda
