// The cuBLASLt stand-in of the emulation (cuda_emu/cublaslt.cc) against a float64 column-major
// reference computed here from cuBLASLt's documented semantics: transposes, leading dimensions
// larger than the rows, strided batches, separate C and D, row-major A/B, bf16 inputs with fp32
// or bf16 outputs (one rounding of the fp32 result), TF32 compute; and the refusals cuBLASLt
// gives (leading dimension below the rows, shapes that do not compose, an algorithm chosen for
// more alignment than the pointers have). FP8: E4M3/E5M2 codes with A/B scale pointers against
// the formats' definition, and the FP8 requirements cuBLASLt documents (TN, k and leading
// dimensions multiples of 16, not E5M2 x E5M2; scale pointers only with FP8 operands).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdint>

#include <cmath>
#include <random>
#include <vector>

namespace {

struct Mat {
  cudaDataType type;
  int64_t rows, cols, ld;
  int32_t batch = 1;
  int64_t stride = 0;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  size_t elems() const {
    const int64_t major = order == CUBLASLT_ORDER_COL ? cols : rows;
    return size_t(ld * major + (batch - 1) * stride);
  }
  // Element (r, c) of batch b in the host copy.
  size_t at(int64_t r, int64_t c, int32_t b) const {
    return size_t(b * stride + (order == CUBLASLT_ORDER_COL ? c * ld + r : r * ld + c));
  }
};

cublasLtMatrixLayout_t layout(const Mat& m) {
  cublasLtMatrixLayout_t l;
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, m.type, uint64_t(m.rows), uint64_t(m.cols), m.ld),
            CUBLAS_STATUS_SUCCESS);
  if (m.batch > 1) {
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &m.batch,
                                               sizeof(m.batch)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &m.stride, sizeof(m.stride)),
              CUBLAS_STATUS_SUCCESS);
  }
  if (m.order != CUBLASLT_ORDER_COL) {
    const int32_t o = m.order;
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &o, sizeof(o)),
              CUBLAS_STATUS_SUCCESS);
  }
  return l;
}

float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Host values of a matrix (exactly representable in its type), uploaded as that type.
struct Operand {
  Mat m;
  std::vector<float> host;
  void* dev = nullptr;
  Operand(const Mat& mat, uint32_t seed) : m(mat), host(mat.elems()) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float& v : host) v = m.type == CUDA_R_16BF ? round_bf16(d(g)) : d(g);
    const size_t es = m.type == CUDA_R_32F ? 4 : 2;
    EXPECT_EQ(cudaMalloc(&dev, host.size() * es), cudaSuccess);
    upload();
  }
  void upload() {
    if (m.type == CUDA_R_32F) {
      EXPECT_EQ(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::vector<__nv_bfloat16> b(host.size());
      for (size_t i = 0; i < b.size(); ++i) b[i] = __float2bfloat16_rn(host[i]);
      EXPECT_EQ(cudaMemcpy(dev, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<float> download() const {
    std::vector<float> out(host.size());
    if (m.type == CUDA_R_32F) {
      EXPECT_EQ(cudaMemcpy(out.data(), dev, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      std::vector<__nv_bfloat16> b(out.size());
      EXPECT_EQ(cudaMemcpy(b.data(), dev, b.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < b.size(); ++i) out[i] = __bfloat162float(b[i]);
    }
    return out;
  }
  ~Operand() { cudaFree(dev); }
};

struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  cudaDataType ab, cd;
  int32_t batch;
  bool row_a;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};

cublasStatus_t run(cublasLtHandle_t h, const Problem& p, Operand& A, Operand& B, Operand& C,
                   Operand& D, float alpha, float beta, uint32_t align = 0) {
  cublasLtMatmulDesc_t op;
  EXPECT_EQ(cublasLtMatmulDescCreate(&op, p.compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t oa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob));
  cublasLtMatrixLayout_t la = layout(A.m), lb = layout(B.m), lc = layout(C.m), ld = layout(D.m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  if (align)
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, ld, pref, 1, &heur, &found);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(h, op, &alpha, A.dev, la, B.dev, lb, &beta, C.dev, lc, D.dev, ld,
                        &heur.algo, nullptr, 0, nullptr);
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  return st;
}

class EmuCublasLt : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasLtCreate(&h_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { cublasLtDestroy(h_); }
  cublasLtHandle_t h_ = nullptr;
};

TEST_F(EmuCublasLt, MatchesTheColumnMajorDefinition) {
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (cudaDataType ab : {CUDA_R_32F, CUDA_R_16BF})
        for (cudaDataType cd : {CUDA_R_32F, CUDA_R_16BF}) {
          if (ab == CUDA_R_32F && cd == CUDA_R_16BF) continue;
          for (bool row_a : {false, true}) {
            const Problem p{ta, tb, 13, 7, 21, ab, cd, 3, row_a};
            SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb << " ab " << ab
                                              << " cd " << cd << " rowA " << row_a);
            // op(A) is m x k: stored k x m when transposed; padded leading dims; batches.
            Mat ma{ab, ta ? p.k : p.m, ta ? p.m : p.k, 0, p.batch, 0,
                   row_a ? CUBLASLT_ORDER_ROW : CUBLASLT_ORDER_COL};
            ma.ld = (row_a ? ma.cols : ma.rows) + 3;
            ma.stride = ma.ld * (row_a ? ma.rows : ma.cols) + 5;
            Mat mb{ab, tb ? p.n : p.k, tb ? p.k : p.n, (tb ? p.n : p.k) + 2, p.batch, 0};
            mb.stride = mb.ld * mb.cols + 1;
            Mat mc{cd, p.m, p.n, p.m + 4, p.batch, (p.m + 4) * p.n};
            Mat md{cd, p.m, p.n, p.m + 1, p.batch, (p.m + 1) * p.n + 7};
            Operand A(ma, seed++), B(mb, seed++), C(mc, seed++), D(md, seed++);
            const std::vector<float> d_before = D.host;
            const float alpha = 0.75f, beta = -1.5f;
            ASSERT_EQ(run(h_, p, A, B, C, D, alpha, beta), CUBLAS_STATUS_SUCCESS);
            const std::vector<float> got = D.download();
            for (int32_t b = 0; b < p.batch; ++b)
              for (int64_t i = 0; i < p.m; ++i)
                for (int64_t j = 0; j < p.n; ++j) {
                  double acc = 0;
                  for (int64_t l = 0; l < p.k; ++l) {
                    const double a = A.host[ta ? ma.at(l, i, b) : ma.at(i, l, b)];
                    const double bb = B.host[tb ? mb.at(j, l, b) : mb.at(l, j, b)];
                    acc += a * bb;
                  }
                  double want = alpha * acc + beta * C.host[mc.at(i, j, b)];
                  double tol = 1e-5 * (std::fabs(want) + double(p.k));
                  if (cd == CUDA_R_16BF) {
                    want = round_bf16(float(want));
                    tol = std::fabs(want) / 128.0 + 1e-5 * double(p.k);
                  }
                  ASSERT_NEAR(got[md.at(i, j, b)], want, tol)
                      << "batch " << b << " (" << i << "," << j << ")";
                }
            // Padding of D (between columns and between batches) is left alone.
            for (int64_t j = 0; j < p.n; ++j)
              EXPECT_EQ(got[md.at(p.m, j, 0)], d_before[md.at(p.m, j, 0)]);
          }
        }
}

TEST_F(EmuCublasLt, Tf32ComputeRoundsTheInputs) {
  // 1 + 2^-12 is not a TF32 number (10 mantissa bits): the product sees 1.0 under TF32.
  const Problem p{false, false, 1, 1, 1, CUDA_R_32F, CUDA_R_32F, 1, false,
                  CUBLAS_COMPUTE_32F_FAST_TF32};
  Operand A(Mat{CUDA_R_32F, 1, 1, 1}, 1), B(Mat{CUDA_R_32F, 1, 1, 1}, 2),
      C(Mat{CUDA_R_32F, 1, 1, 1}, 3), D(Mat{CUDA_R_32F, 1, 1, 1}, 4);
  A.host[0] = 1.0f + std::ldexp(1.0f, -12);
  B.host[0] = 1.0f;
  A.upload();
  B.upload();
  ASSERT_EQ(run(h_, p, A, B, C, D, 1.0f, 0.0f), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(D.download()[0], 1.0f);
  Problem exact = p;
  exact.compute = CUBLAS_COMPUTE_32F;
  ASSERT_EQ(run(h_, exact, A, B, C, D, 1.0f, 0.0f), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(D.download()[0], A.host[0]);
}

TEST_F(EmuCublasLt, RefusesWhatCublasLtRefuses) {
  const Problem p{false, false, 8, 8, 8, CUDA_R_32F, CUDA_R_32F, 1, false};
  Operand B(Mat{CUDA_R_32F, 8, 8, 8}, 2), C(Mat{CUDA_R_32F, 8, 8, 8}, 3),
      D(Mat{CUDA_R_32F, 8, 8, 8}, 4);
  {
    Operand A(Mat{CUDA_R_32F, 8, 8, 7}, 1);  // ld 7 < 8 rows
    EXPECT_EQ(run(h_, p, A, B, C, D, 1.0f, 0.0f), CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    Operand A(Mat{CUDA_R_32F, 8, 5, 8}, 1);  // k = 5 does not match B's 8 rows
    EXPECT_EQ(run(h_, p, A, B, C, D, 1.0f, 0.0f), CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    // An algorithm chosen for 256-byte alignment, given a pointer aligned to 4 bytes.
    Operand A(Mat{CUDA_R_32F, 8, 9, 8}, 1);
    const Mat shifted{CUDA_R_32F, 8, 8, 8};
    A.m = shifted;
    A.dev = static_cast<float*>(A.dev) + 1;
    EXPECT_EQ(run(h_, p, A, B, C, D, 1.0f, 0.0f, 256), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(run(h_, p, A, B, C, D, 1.0f, 0.0f, 4), CUBLAS_STATUS_SUCCESS);
    A.dev = static_cast<float*>(A.dev) - 1;
  }
  {
    // Host memory is not an operand.
    Operand A(Mat{CUDA_R_32F, 8, 8, 8}, 1);
    void* dev = A.dev;
    A.dev = A.host.data();
    EXPECT_EQ(run(h_, p, A, B, C, D, 1.0f, 0.0f), CUBLAS_STATUS_INVALID_VALUE);
    A.dev = dev;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The value of an FP8 code from the format's definition (sign, exponent field, mantissa field;
// subnormals at exponent 0). Finite codes only (the test draws no NaN/inf codes).
double fp8_value(uint8_t code, bool e4m3) {
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (code & 0x7f) >> mbits, m = code & ((1 << mbits) - 1);
  const double v = e == 0 ? std::ldexp(double(m), 1 - bias - mbits)
                          : std::ldexp(1.0 + double(m) / (1 << mbits), e - bias);
  return code & 0x80 ? -v : v;
}

struct Fp8Run {
  cudaDataType ta = CUDA_R_8F_E4M3, tb = CUDA_R_8F_E5M2;
  cublasOperation_t oa = CUBLAS_OP_T, ob = CUBLAS_OP_N;
  int64_t m = 8, n = 12, k = 32, lda = 48, ldb = 32;
  bool scales = true;
};

// D (f32, m x n, ld m) = alpha * sa * sb * op(A) op(B) + beta * C, A stored (k, m), B (k, n).
cublasStatus_t run_fp8(cublasLtHandle_t h, const Fp8Run& r, std::vector<uint8_t>& a,
                       std::vector<uint8_t>& b, std::vector<float>& c, float alpha, float beta,
                       float sa, float sb, std::vector<float>* d_out) {
  a.resize(size_t(r.lda * r.m));
  b.resize(size_t(r.ldb * r.n));
  c.resize(size_t(r.m * r.n));
  std::mt19937 g(9);
  for (auto& x : a) x = uint8_t(g() & 0xff) & 0xf7;  // clears bit 3: no NaN/inf codes
  for (auto& x : b) x = uint8_t(g() & 0xff) & 0xf3;  // clears bit 3 and 2 (E5M2 exponent < 31)
  for (auto& x : c) x = float(int(g() % 7) - 3);
  void *da, *db, *dc, *dd, *ds;
  EXPECT_EQ(cudaMalloc(&da, a.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&db, b.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dc, c.size() * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dd, c.size() * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&ds, 8), cudaSuccess);
  const float sc[2] = {sa, sb};
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(ds, sc, 8, cudaMemcpyHostToDevice);
  cublasLtMatmulDesc_t op;
  EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &r.oa, sizeof(r.oa));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &r.ob, sizeof(r.ob));
  if (r.scales) {
    const void* pa = ds;
    const void* pb = static_cast<float*>(ds) + 1;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof(pa));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof(pb));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, r.ta, uint64_t(r.k), uint64_t(r.m), r.lda);
  cublasLtMatrixLayoutCreate(&lb, r.tb, uint64_t(r.k), uint64_t(r.n), r.ldb);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, uint64_t(r.m), uint64_t(r.n), r.m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &heur, &found);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(h, op, &alpha, da, la, db, lb, &beta, dc, lc, dd, lc, &heur.algo, nullptr,
                        0, nullptr);
  if (st == CUBLAS_STATUS_SUCCESS && d_out) {
    d_out->resize(c.size());
    EXPECT_EQ(cudaMemcpy(d_out->data(), dd, c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  for (void* p : {da, db, dc, dd, ds}) cudaFree(p);
  return st;
}

TEST_F(EmuCublasLt, Fp8MatchesTheFormatsDefinitionWithScales) {
  for (auto [ta, tb] : {std::pair{CUDA_R_8F_E4M3, CUDA_R_8F_E5M2},
                        std::pair{CUDA_R_8F_E5M2, CUDA_R_8F_E4M3},
                        std::pair{CUDA_R_8F_E4M3, CUDA_R_8F_E4M3}}) {
    Fp8Run r;
    r.ta = ta, r.tb = tb;
    std::vector<uint8_t> a, b;
    std::vector<float> c, d;
    const float alpha = 0.75f, beta = 0.5f, sa = 0.0625f, sb = 3.0f;
    ASSERT_EQ(run_fp8(h_, r, a, b, c, alpha, beta, sa, sb, &d), CUBLAS_STATUS_SUCCESS);
    for (int64_t i = 0; i < r.m; ++i)
      for (int64_t j = 0; j < r.n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t l = 0; l < r.k; ++l) {
          const double p = fp8_value(a[size_t(i * r.lda + l)], ta == CUDA_R_8F_E4M3) *
                           fp8_value(b[size_t(j * r.ldb + l)], tb == CUDA_R_8F_E4M3);
          acc += p;
          mag += std::fabs(p);
        }
        const double scale = double(alpha) * sa * sb;
        const double want = scale * acc + beta * c[size_t(j * r.m + i)];
        // fp32 accumulation of exact products: k * 2^-24 of sum |p|, plus the final roundings.
        const double tol = scale * mag * r.k * std::ldexp(1.0, -23) + 1e-6 * std::fabs(want);
        ASSERT_NEAR(d[size_t(j * r.m + i)], want, tol) << i << "," << j;
      }
  }
}

TEST_F(EmuCublasLt, Fp8RefusesWhatTheDocumentedRequirementsExclude) {
  std::vector<uint8_t> a, b;
  std::vector<float> c;
  auto status = [&](Fp8Run r) { return run_fp8(h_, r, a, b, c, 1.0f, 0.0f, 1.0f, 1.0f, nullptr); };
  EXPECT_EQ(status(Fp8Run{}), CUBLAS_STATUS_SUCCESS);
  Fp8Run nn;
  nn.oa = CUBLAS_OP_N;  // not TN
  EXPECT_EQ(status(nn), CUBLAS_STATUS_NOT_SUPPORTED);
  Fp8Run e5e5;
  e5e5.ta = CUDA_R_8F_E5M2;
  EXPECT_EQ(status(e5e5), CUBLAS_STATUS_NOT_SUPPORTED);
  Fp8Run odd_k;
  odd_k.k = 24;
  EXPECT_EQ(status(odd_k), CUBLAS_STATUS_NOT_SUPPORTED);
  Fp8Run odd_ld;
  odd_ld.lda = 40;
  EXPECT_EQ(status(odd_ld), CUBLAS_STATUS_NOT_SUPPORTED);
  Fp8Run mixed;
  mixed.tb = CUDA_R_16BF;
  EXPECT_EQ(status(mixed), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
