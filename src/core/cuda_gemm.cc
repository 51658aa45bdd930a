// cuBLASLt GEMM wrapper (see cuda_gemm.h for the semantics). Each problem key gets one plan
// (descriptors + the heuristic's algorithm), made on first use and cached. The heuristic is told
// the real alignment of each pointer (part of the key) so it never picks a kernel that assumes
// more.
#if VTRAIN_HAS_CUDA
#include "core/cuda_gemm.h"

#include <algorithm>

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

}  // namespace

// The descriptors of one problem and the algorithm chosen for it.
struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  VT_CUBLASLT_CHECK(cublasLtCreate(&handle_));
  if (workspace_bytes_ > 0) VT_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc, cudaStream_t stream, const float* C_in,
                      GemmBatch batch) {
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F, CUDA_R_32F,
         stream, C_in, batch);
}

void Gemm::operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                      float beta, __nv_bfloat16* C, int64_t ldc, cudaStream_t stream,
                      const __nv_bfloat16* C_in, GemmBatch batch) {
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF,
         CUDA_R_16BF, stream, C_in, batch);
}

void Gemm::operator()(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                      float beta, float* C, int64_t ldc, cudaStream_t stream,
                      const float* C_in, GemmBatch batch) {
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF,
         CUDA_R_32F, stream, C_in, batch);
}

void Gemm::matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                  int64_t ldc, cudaDataType_t ab_type, cudaDataType_t c_type,
                  cudaStream_t stream, const void* C_in, GemmBatch batch) {
  VT_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0, "gemm dimensions must be >= 0");
  VT_CUDA_REQUIRE(batch.count >= 1 && batch.count <= INT32_MAX, "gemm batch count out of range");
  if (batch.count == 1) batch = GemmBatch{};  // one plan for every unbatched call
  if (M == 0 || N == 0) return;
  // Row-major leading dims: A is (M,K) or (K,M) when trans_a, etc.
  VT_CUDA_REQUIRE(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
                  "gemm leading dimension smaller than the row width");
  // K == 0 (C = beta * C) is not needed by any caller and cuBLASLt's support for it is not
  // something to rely on: rejected.
  VT_CUDA_REQUIRE(K > 0, "gemm with K = 0 is not supported");

  // Every problem of a batch starts stride elements after the previous one: its alignment is
  // the lesser of the base pointer's and the stride's in bytes.
  const size_t ab_size = ab_type == CUDA_R_32F ? 4 : 2, c_size = c_type == CUDA_R_32F ? 4 : 2;
  auto aligned = [&](const void* p, int64_t stride, size_t size) {
    const uint32_t al = alignment_of(p);
    if (batch.count == 1) return al;
    return std::min(al, alignment_of(reinterpret_cast<const void*>(uintptr_t(stride) * size)));
  };
  const uint32_t al_c = std::min(aligned(C, batch.stride_c, c_size),
                                 C_in ? aligned(C_in, batch.stride_c, c_size) : 256u);
  const Key key{trans_a, trans_b, M,        N,        K,        lda,
                ldb,     ldc,     int(ab_type), int(c_type), aligned(A, batch.stride_a, ab_size),
                aligned(B, batch.stride_b, ab_size), al_c,
                batch.count, batch.stride_a, batch.stride_b, batch.stride_c};
  const Plan& p = plan(key);
  VT_CUBLASLT_CHECK(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C_in ? C_in : C,
                                   p.c, C, p.c, &p.algo, workspace_, workspace_bytes_, stream));
}

void Gemm::fp8(int64_t M, int64_t N, int64_t K, float alpha, const void* A,
               cudaDataType_t a_type, int64_t lda, const float* a_scale, const void* B,
               cudaDataType_t b_type, int64_t ldb, const float* b_scale, float beta, void* C,
               cudaDataType_t c_type, int64_t ldc, cudaStream_t stream, const void* C_in) {
  VT_CUDA_REQUIRE(M >= 0 && N >= 0 && K > 0, "fp8 gemm dimensions must be >= 0, K > 0");
  if (M == 0 || N == 0) return;
  VT_CUDA_REQUIRE(lda >= K && ldb >= K && ldc >= N, "fp8 gemm leading dimension too small");
  // The row-major C = A B^T is the column-major C^T = B A^T: A' = B transposed (T), B' = A (N).
  const int ab = kFp8Key | int(b_type) | (int(a_type) << 8);
  const Key key{false, true, M, N, K, lda, ldb, ldc, ab, int(c_type), alignment_of(A),
                alignment_of(B),
                std::min(alignment_of(C), C_in ? alignment_of(C_in) : alignment_of(C)),
                int64_t{1}, int64_t{0}, int64_t{0}, int64_t{0}};
  const Plan& p = plan(key);
  // The scale pointers change per call (stream-ordered scratch): set on the cached descriptor
  // before each matmul (calls are ordered, see the header). A' = B, B' = A.
  VT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                   &b_scale, sizeof(b_scale)));
  VT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                   &a_scale, sizeof(a_scale)));
  VT_CUBLASLT_CHECK(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C_in ? C_in : C,
                                   p.c, C, p.c, &p.algo, workspace_, workspace_bytes_, stream));
}

const Gemm::Plan& Gemm::plan(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    ++hits_;
    return *it->second;
  }
  ++misses_;
  const auto [trans_a, trans_b, M, N, K, lda, ldb, ldc, ab, ct, al_A, al_B, al_C, count, stride_A,
              stride_B, stride_C] = key;
  // FP8 keys carry A' and B' types apart (see Key).
  const bool fp8 = (ab & kFp8Key) != 0;
  const cudaDataType_t ab_type = cudaDataType_t(fp8 ? (ab & 0xff) : ab),
                       b_type = cudaDataType_t(fp8 ? ((ab >> 8) & 0xff) : ab),
                       c_type = cudaDataType_t(ct);
  // Column-major problem: C'(m = N, n = M) = op'(A') op'(B'), A' = B, B' = A.
  const uint64_t m = uint64_t(N), n = uint64_t(M), k = uint64_t(K);
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // on A' = B
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // on B' = A
  // Stored (column-major) shapes: A' is (m,k) when N, (k,m) when T; B' is (k,n) or (n,k).
  const uint64_t a_rows = trans_b ? k : m, a_cols = trans_b ? m : k;
  const uint64_t b_rows = trans_a ? n : k, b_cols = trans_a ? k : n;

  auto d = std::make_unique<Plan>();
  VT_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  VT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                   sizeof(op_a)));
  VT_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                   sizeof(op_b)));
  VT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d->a, ab_type, a_rows, a_cols, ldb));
  VT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d->b, b_type, b_rows, b_cols, lda));
  VT_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d->c, c_type, m, n, ldc));
  if (count > 1) {  // A' = B, B' = A: each layout takes its operand's stride
    const int32_t batch_count = static_cast<int32_t>(count);
    const int64_t strides[3] = {stride_B, stride_A, stride_C};
    const cublasLtMatrixLayout_t layouts[3] = {d->a, d->b, d->c};
    for (int i = 0; i < 3; ++i) {
      VT_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(
          layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count, sizeof(batch_count)));
      VT_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(
          layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
          sizeof(strides[i])));
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  VT_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  // A' = B, B' = A: the heuristic's A alignment is that of our B, and so on.
  const uint32_t al_a = al_B, al_b = al_A, al_c = al_C;
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                              &al_a, sizeof(al_a));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                              &al_b, sizeof(al_b));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                              &al_c, sizeof(al_c));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &al_c, sizeof(al_c));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle_, d->op, d->a, d->b, d->c, d->c, pref, 1, &heur,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  VT_CUBLASLT_CHECK(st);
  VT_CUDA_REQUIRE(found > 0, "cuBLASLt found no algorithm for this GEMM (types/alignment)");
  d->algo = heur.algo;
  return *plans_.emplace(key, std::move(d)).first->second;
}

size_t Gemm::plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}
uint64_t Gemm::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
uint64_t Gemm::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace vt::cuda

#endif  // VTRAIN_HAS_CUDA
