// GEMM on the GPU through cuBLASLt, with the row-major semantics of vt::cpu::gemm:
//   C(M,N) = alpha * op(A) * op(B) + beta * C,  op(A) (M,K), op(B) (K,N),
//   A stored (M,K) with leading dim lda, or (K,M) when trans_a; same for B; C (M,N), ldc.
// Row-major C is column-major C^T = op(B)^T op(A)^T, so the call to cuBLASLt swaps the operands
// (A' = B, B' = A, m = N, n = M) and keeps each operand's transpose flag.
//
// Types: fp32 A/B/C (pure fp32 compute, CUBLAS_COMPUTE_32F, no TF32: used by the tests), and
// bf16 A/B with fp32 accumulation writing bf16 or fp32 C. alpha and beta are fp32. C_in (C's type
// and layout), when given, is the matrix the beta term reads: C = alpha op(A) op(B) + beta C_in,
// C only written (cuBLASLt's C and D).
// The Gemm object owns the cuBLASLt handle and a device workspace; calls enqueue on `stream`.
// Calls may come from several host threads but must be ordered (one stream, or otherwise: they
// share the workspace).
//
// A strided batch (GemmBatch): `count` problems, problem i at i * stride_* elements of each
// operand (C_in shares C's stride), one cuBLASLt call (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and
// _STRIDED_BATCH_OFFSET on the three layouts).
//
// FP8 (Hopper): fp8() multiplies FP8 codes, A (M,K) and B (N,K) row-major (K-contiguous, the
// "TN" layout Hopper's FP8 kernels take): C(M,N) = alpha * a_scale * b_scale * A B^T + beta C_in,
// the scales device fp32 (the dequantization factors), fp32 accumulation, bf16 or fp32 C.
// cuBLASLt requires K, lda and ldb multiples of 16 and A, B 16-byte aligned.
//
// Plans are cached: the matmul descriptor, the three matrix layouts and the algorithm the
// heuristic picked are made once per problem key (transposes, M, N, K, leading dims, types and
// the alignment of each pointer) and reused by every later call with that key, so a training
// step asks cuBLASLt for nothing but the matmuls themselves.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace vt::cuda {

struct GemmBatch {
  int64_t count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

class Gemm {
 public:
  // 32 MiB: what NVIDIA recommends for cuBLASLt on Hopper.
  explicit Gemm(size_t workspace_bytes = size_t(32) << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, cudaStream_t stream, const float* C_in = nullptr,
                  GemmBatch batch = {});
  void operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                  float beta, __nv_bfloat16* C, int64_t ldc, cudaStream_t stream,
                  const __nv_bfloat16* C_in = nullptr, GemmBatch batch = {});
  void operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, cudaStream_t stream,
                  const float* C_in = nullptr, GemmBatch batch = {});
  // FP8: a_type/b_type CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2 (not both E5M2), c_type CUDA_R_16BF or
  // CUDA_R_32F (C_in the same).
  void fp8(int64_t M, int64_t N, int64_t K, float alpha, const void* A, cudaDataType_t a_type,
           int64_t lda, const float* a_scale, const void* B, cudaDataType_t b_type, int64_t ldb,
           const float* b_scale, float beta, void* C, cudaDataType_t c_type, int64_t ldc,
           cudaStream_t stream, const void* C_in = nullptr);

 // Cached plans, and how many calls found theirs (hits) or made one (misses).
  size_t plans() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  struct Plan;
  // trans_a, trans_b, M, N, K, lda, ldb, ldc, ab type (FP8: kFp8Key | A' type | B' type << 8,
  // A' = our B, B' = our A), c type, alignments of A, B, C (the lesser of C's and C_in's), batch
  // count and the strides of A, B, C (FP8 calls: count 1, strides 0).
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                         int, uint32_t, uint32_t, uint32_t, int64_t, int64_t, int64_t, int64_t>;
  const Plan& plan(const Key& key);
  static constexpr int kFp8Key = 1 << 16;

  void matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
              int64_t ldc, cudaDataType_t ab_type, cudaDataType_t c_type, cudaStream_t stream,
              const void* C_in, GemmBatch batch);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  mutable std::mutex mu_;  // the plan cache and counters
  std::map<Key, std::unique_ptr<Plan>> plans_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace vt::cuda
