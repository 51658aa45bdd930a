// cuBLASLt GEMM wrapper (see cuda_gemm.h for the semantics). No algorithm cache yet: every call
// builds its descriptors and asks the heuristic for one algorithm (a later tuning step can cache
// by shape). The heuristic is told the real alignment of each pointer so it never picks a
// kernel that assumes more.
#if VTRAIN_HAS_CUDA
#include "core/cuda_gemm.h"

#include <cstdio>

#include "kernels/cuda_check.cuh"

#define VT_CUBLASLT_CHECK(expr)                                                      \
  do {                                                                               \
    const cublasStatus_t vt_lt_st_ = (expr);                                         \
    if (vt_lt_st_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::vt::cuda::require_fail(#expr, cublasLtGetStatusString(vt_lt_st_), __FILE__,   \
                               __LINE__);                                            \
  } while (0)

namespace vt::cuda {
namespace {

// Largest power of two (<= 256) dividing the address.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

// RAII for the per-call descriptors.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  VT_CUBLASLT_CHECK(cublasLtCreate(&handle_));
  if (workspace_bytes_ > 0) VT_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc, cudaStream_t stream) {
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F, CUDA_R_32F,
         stream);
}

void Gemm::operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                      float beta, __nv_bfloat16* C, int64_t ldc, cudaStream_t stream) {
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF,
         CUDA_R_16BF, stream);
}

void Gemm::operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                      float beta, float* C, int64_t ldc, cudaStream_t stream) {
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF,
         CUDA_R_32F, stream);
}

void Gemm::matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                  int64_t ldc, cudaDataType_t ab_type, cudaDataType_t c_type,
                  cudaStream_t stream) {
  VT_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0, "gemm dimensions must be >= 0");
  if (M == 0 || N == 0) return;
  // Row-major leading dims: A is (M,K) or (K,M) when trans_a, etc.
  VT_CUDA_REQUIRE(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
                  "gemm leading dimension smaller than the row width");
  // K == 0 (C = beta * C) is not needed by any caller and cuBLASLt's support for it is not
  // something to rely on: rejected.
  VT_CUDA_REQUIRE(K > 0, "gemm with K = 0 is not supported");

  // Column-major problem: C'(m = N, n = M) = op'(A') op'(B'), A' = B, B' = A.
  const uint64_t m = uint64_t(N), n = uint64_t(M), k = uint64_t(K);
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // on A' = B
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // on B' = A
  // Stored (column-major) shapes: A' is (m,k) when N, (k,m) when T; B' is (k,n) or (n,k).
  const uint64_t a_rows = trans_b ? k : m, a_cols = trans_b ? m : k;
  const uint64_t b_rows = trans_a ? n : k, b_cols = trans_a ? k : n;

  Descs d;
  VT_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  VT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                   sizeof(op_a)));
  VT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                   sizeof(op_b)));
  VT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab_type, a_rows, a_cols, ldb));
  VT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab_type, b_rows, b_cols, lda));
  VT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d.c, c_type, m, n, ldc));

  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = workspace_bytes_;
  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment_of(B), al_b = alignment_of(A), al_c = alignment_of(C);
  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));

  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  VT_CUBLASLT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                                   &heur, &found));
  VT_CUDA_REQUIRE(found > 0, "cuBLASLt found no algorithm for this GEMM (types/alignment)");

  VT_CUBLASLT_CHECK(cublasLtMatmul(handle_, d.op, &alpha, B, d.a, A, d.b, &beta, C, d.c, C, d.c,
                                   &heur.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace vt::cuda

#endif  // VTRAIN_HAS_CUDA
