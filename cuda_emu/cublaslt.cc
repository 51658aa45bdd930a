// A host stand-in for the cuBLASLt matmul API (cublasLtMatmul and its descriptors), computing on
// OpenBLAS with the semantics cuBLASLt documents, so that a caller's use of the descriptors is
// really exercised: column-major storage by default (CUBLASLT_ORDER_ROW supported for A and B),
// TRANSA/TRANSB, leading dimensions (checked against the rows as cuBLASLt does), strided
// batches, D = alpha * op(A) op(B) + beta * C with separate C and D, data types
// {A,B} in {32F, 16BF, 16F} with {C,D} in {32F, or the input type}, compute type 32F
// (_FAST_TF32 and _FAST_16BF round the inputs accordingly), host-pointer alpha/beta, and the
// heuristic's alignment preferences (an algorithm chosen for an alignment refuses pointers that
// are less aligned). Every operand must be device memory of the handle's device. Products are
// accumulated in fp32 and rounded once into D, as cuBLASLt's fp32-accumulating kernels do.
// FP8 (Hopper): A and B of CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 (not both E5M2) with
// CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER (device fp32, default 1): D = alpha * scale_A *
// scale_B * op(A) op(B) + beta * C, each code read as the exact value it stands for (decoded by
// cuda_fp8.h's own conversion, not vtrain's), alpha * scale_A * scale_B formed in fp32 in that
// order; C and D 16BF, 16F or 32F. The documented FP8 requirements are enforced: the "TN" format
// (TRANSA = T, TRANSB = N, column-major), compute 32F, scale type 32F, A and B pointers and
// leading dimensions multiples of 16 bytes, k a multiple of 16. D's scale and amax pointers
// (FP8 outputs) are not emulated. CUBLASLT_MATMUL_DESC_FAST_ACCUM is accepted and computes like
// the precise mode (fp32 accumulation throughout; the hardware's fast mode promotes less often).
// Not emulated (refused with CUBLAS_STATUS_NOT_SUPPORTED and a message): epilogues, device
// pointer mode, C/D scale pointers, amax of D, other compute types.
#include <cblas.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime.h"

struct cublasLtContext {
  int device = 0;
};

namespace vt_emu {
namespace {

constexpr uint32_t kAlgoMagic = 0x7645'6d75;  // "vEmu"

struct Layout {
  cudaDataType type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct Desc {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* a_scale = nullptr;  // FP8 operand scales (device fp32), null: 1
  const void* b_scale = nullptr;
  int8_t fast_accum = 0;
  bool unsupported_set = false;  // an attribute the stand-in does not emulate was set
  int32_t unsupported_attr = -1;
};
struct Pref {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};
struct Algo {
  uint32_t magic = 0;
  uint32_t align[4] = {0, 0, 0, 0};
};

static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

Layout* L(cublasLtMatrixLayout_t p) { return reinterpret_cast<Layout*>(p->data); }
Desc* D(cublasLtMatmulDesc_t p) { return reinterpret_cast<Desc*>(p->data); }
Pref* P(cublasLtMatmulPreference_t p) { return reinterpret_cast<Pref*>(p->data); }

cublasStatus_t refuse(cublasStatus_t st, const std::string& why) {
  std::fprintf(stderr, "vt_emu cuBLASLt: %s\n", why.c_str());
  return st;
}

template <class T>
cublasStatus_t set_attr(T* field, const void* buf, size_t size, const char* what) {
  if (!buf || size != sizeof(T))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  std::string(what) + ": attribute buffer of " + std::to_string(size) +
                      " bytes, expected " + std::to_string(sizeof(T)));
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

size_t type_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF: case CUDA_R_16F: return 2;
    case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
    default: return 0;
  }
}

const char* type_name(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return "32F";
    case CUDA_R_16BF: return "16BF";
    case CUDA_R_16F: return "16F";
    case CUDA_R_8F_E4M3: return "8F_E4M3";
    case CUDA_R_8F_E5M2: return "8F_E5M2";
    default: return "an unsupported type";
  }
}

// Rows x cols of op(M) for a stored layout.
void op_dims(const Layout& l, bool trans, uint64_t* r, uint64_t* c) {
  *r = trans ? l.cols : l.rows;
  *c = trans ? l.rows : l.cols;
}

// Elements a layout spans in one batch.
uint64_t span(const Layout& l) {
  const uint64_t minor = l.order == CUBLASLT_ORDER_ROW ? l.cols : l.rows;
  const uint64_t major = l.order == CUBLASLT_ORDER_ROW ? l.rows : l.cols;
  return major == 0 ? 0 : uint64_t(l.ld) * (major - 1) + minor;
}

bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

// Checks an FP8 problem against the documented requirements (see the top).
cublasStatus_t check_fp8_problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c,
                                 const Layout& dd, uint64_t* m, uint64_t* n, uint64_t* k) {
  if (!is_fp8(a.type) || !is_fp8(b.type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string("FP8 needs both A and B in FP8, got ") +
                                                   type_name(a.type) + " x " + type_name(b.type));
  if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 E5M2 x E5M2 is not supported");
  if (d.compute != CUBLAS_COMPUTE_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 needs compute type CUBLAS_COMPUTE_32F");
  if (d.transa != CUBLAS_OP_T || d.transb != CUBLAS_OP_N)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "FP8 needs the TN format: A transposed, B not (TRANSA = T, TRANSB = N)");
  for (const Layout* l : {&a, &b, &c, &dd})
    if (l->order != CUBLASLT_ORDER_COL)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 needs column-major matrices");
  if (c.type != dd.type ||
      (dd.type != CUDA_R_16BF && dd.type != CUDA_R_16F && dd.type != CUDA_R_32F))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  std::string("FP8 with C/D ") + type_name(c.type) + "/" + type_name(dd.type) +
                      " is not emulated (C = D type in 16BF, 16F or 32F)");
  for (const Layout* l : {&a, &b, &c, &dd})
    if (l->ld < 0 || uint64_t(l->ld) < l->rows)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "leading dimension " + std::to_string(l->ld) +
                                                     " < " + std::to_string(l->rows));
  if (a.ld % 16 != 0 || b.ld % 16 != 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "FP8 leading dimensions of A and B must be multiples of 16 bytes");
  // TN: A stored (k, m), B stored (k, n).
  *m = dd.rows;
  *n = dd.cols;
  *k = a.rows;
  if (a.cols != *m || b.cols != *n || b.rows != *k || c.rows != dd.rows || c.cols != dd.cols)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "FP8 shapes do not compose (TN)");
  if (*k % 16 != 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "FP8 needs k to be a multiple of 16, got " + std::to_string(*k));
  if (a.batch != dd.batch || b.batch != dd.batch || c.batch != dd.batch || dd.batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts of A, B, C and D differ");
  return CUBLAS_STATUS_SUCCESS;
}

// Checks the problem as cuBLASLt would before choosing an algorithm.
cublasStatus_t check_problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c,
                             const Layout& dd, uint64_t* m, uint64_t* n, uint64_t* k) {
  if (d.unsupported_set)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "matmul descriptor attribute " + std::to_string(d.unsupported_attr) +
                      " is not emulated");
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogues are not emulated");
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only host pointer mode is emulated");
  if (d.scale != CUDA_R_32F) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "scale type must be 32F");
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
      d.compute != CUBLAS_COMPUTE_32F_FAST_TF32 && d.compute != CUBLAS_COMPUTE_32F_FAST_16BF)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "compute type " + std::to_string(d.compute) + " is not emulated");
  if (d.transa != CUBLAS_OP_N && d.transa != CUBLAS_OP_T)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSA must be N or T");
  if (d.transb != CUBLAS_OP_N && d.transb != CUBLAS_OP_T)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSB must be N or T");
  const bool fp8 = is_fp8(a.type) || is_fp8(b.type);
  if (fp8) return check_fp8_problem(d, a, b, c, dd, m, n, k);
  if (d.a_scale || d.b_scale)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "A/B scale pointers are for FP8 operands only");
  if (a.type != b.type || !type_size(a.type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string("A and B types ") + type_name(a.type) +
                                                   " x " + type_name(b.type) + " not supported");
  if (c.type != dd.type || (c.type != CUDA_R_32F && c.type != a.type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string("C/D type ") + type_name(c.type) +
                                                   " with A/B " + type_name(a.type));
  if (a.type == CUDA_R_32F && c.type != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "32F inputs need 32F outputs");
  for (const Layout* l : {&a, &b, &c, &dd}) {
    const uint64_t minor = l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows;
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only COL and ROW orders are emulated");
    if (l->ld < 0 || uint64_t(l->ld) < minor)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "leading dimension " + std::to_string(l->ld) + " < " + std::to_string(minor) +
                        " (the rows of a column-major matrix)");
  }
  if (c.order != CUBLASLT_ORDER_COL || dd.order != CUBLASLT_ORDER_COL)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C and D must be column-major");
  uint64_t ar, ac, br, bc;
  op_dims(a, d.transa == CUBLAS_OP_T, &ar, &ac);
  op_dims(b, d.transb == CUBLAS_OP_T, &br, &bc);
  *m = dd.rows;
  *n = dd.cols;
  *k = ac;
  if (ar != *m || bc != *n || br != *k || c.rows != dd.rows || c.cols != dd.cols)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "shapes do not compose: op(A) " + std::to_string(ar) + "x" + std::to_string(ac) +
                      ", op(B) " + std::to_string(br) + "x" + std::to_string(bc) + ", C " +
                      std::to_string(c.rows) + "x" + std::to_string(c.cols) + ", D " +
                      std::to_string(dd.rows) + "x" + std::to_string(dd.cols));
  if (a.batch != dd.batch || b.batch != dd.batch || c.batch != dd.batch || dd.batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts of A, B, C and D differ");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_operand(const void* p, const Layout& l, int device, const char* name) {
  const uint64_t elems = span(l) + uint64_t(l.batch - 1) * uint64_t(l.stride);
  const Region r = classify(p, elems * type_size(l.type));
  if (!r.known || r.kind != MemKind::kDevice || r.device != device)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  std::string("matrix ") + name + " (" + std::to_string(elems) +
                      " elements from its pointer) is not inside device memory of device " +
                      std::to_string(device) + ": " + describe(classify(p, 0)));
  return CUBLAS_STATUS_SUCCESS;
}

float round_tf32(float x) {
  if (!std::isfinite(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0xfffu + ((u >> 13) & 1u);  // round to nearest even at 10 mantissa bits
  u &= 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

float load(const void* base, cudaDataType t, uint64_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: {
      // The code's value through NVIDIA's conversion (exact: every FP8 value is a half).
      const __nv_fp8_storage_t code = static_cast<const __nv_fp8_storage_t*>(base)[i];
      const __half_raw h =
          __nv_cvt_fp8_to_halfraw(code, t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
      return __half2float(__half(h));
    }
    default: return NAN;
  }
}

void store(void* base, cudaDataType t, uint64_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(base)[i] = v; break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    case CUDA_R_16F: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    default: break;
  }
}

// One batch's operand as an fp32 array with the same geometry (converted / rounded for the
// compute type); f32 operands without rounding are used in place.
const float* as_f32(const void* p, const Layout& l, int32_t compute, std::vector<float>& buf) {
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const bool bf = compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  if (l.type == CUDA_R_32F && !tf32 && !bf) return static_cast<const float*>(p);
  const uint64_t n = span(l);
  buf.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    float v = load(p, l.type, i);
    if (tf32) v = round_tf32(v);
    if (bf) v = __bfloat162float(__float2bfloat16_rn(v));
    buf[i] = v;
  }
  return buf.data();
}

struct Call {
  Desc d;
  Layout a, b, c, dd;
  const void *A, *B, *C;
  void* Dp;
  float alpha, beta;  // alpha includes the FP8 scales
  uint64_t m, n, k;
};

void execute(const Call& x) {
  std::vector<float> abuf, bbuf, tmp;
  const size_t as = type_size(x.a.type), cs = type_size(x.c.type);
  for (int32_t bi = 0; bi < x.dd.batch; ++bi) {
    const void* A = static_cast<const char*>(x.A) + size_t(bi) * size_t(x.a.stride) * as;
    const void* B = static_cast<const char*>(x.B) + size_t(bi) * size_t(x.b.stride) * as;
    const void* C = static_cast<const char*>(x.C) + size_t(bi) * size_t(x.c.stride) * cs;
    void* Dp = static_cast<char*>(x.Dp) + size_t(bi) * size_t(x.dd.stride) * cs;
    const float* af = as_f32(A, x.a, x.d.compute, abuf);
    const float* bf = as_f32(B, x.b, x.d.compute, bbuf);
    // A row-major matrix is the transpose of the same bytes read column-major.
    bool ta = x.d.transa == CUBLAS_OP_T, tb = x.d.transb == CUBLAS_OP_T;
    if (x.a.order == CUBLASLT_ORDER_ROW) ta = !ta;
    if (x.b.order == CUBLASLT_ORDER_ROW) tb = !tb;
    const CBLAS_TRANSPOSE cta = ta ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE ctb = tb ? CblasTrans : CblasNoTrans;
    const int M = int(x.m), N = int(x.n), K = int(x.k);
    if (x.c.type == CUDA_R_32F && C == Dp && x.c.ld == x.dd.ld) {
      cblas_sgemm(CblasColMajor, cta, ctb, M, N, K, x.alpha, af, int(x.a.ld), bf, int(x.b.ld),
                  x.beta, static_cast<float*>(Dp), int(x.dd.ld));
      continue;
    }
    tmp.assign(size_t(x.m) * size_t(x.n), 0.0f);
    if (x.beta != 0.0f)
      for (uint64_t j = 0; j < x.n; ++j)
        for (uint64_t i = 0; i < x.m; ++i)
          tmp[j * x.m + i] = load(C, x.c.type, j * uint64_t(x.c.ld) + i);
    cblas_sgemm(CblasColMajor, cta, ctb, M, N, K, x.alpha, af, int(x.a.ld), bf, int(x.b.ld),
                x.beta, tmp.data(), M);
    for (uint64_t j = 0; j < x.n; ++j)
      for (uint64_t i = 0; i < x.m; ++i)
        store(Dp, x.dd.type, j * uint64_t(x.dd.ld) + i, tmp[j * x.m + i]);
  }
}

}  // namespace
}  // namespace vt_emu

using namespace vt_emu;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  if (device_count() == 0) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "no emulated device");
  *h = new cublasLtContext{current_device()};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  auto* o = new cublasLtMatrixLayoutOpaque_t{};
  Layout* l = new (o->data) Layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t h,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  Layout* l = L(h);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      uint32_t t;
      cublasStatus_t st = set_attr(&t, buf, size, "CUBLASLT_MATRIX_LAYOUT_TYPE");
      if (st == CUBLAS_STATUS_SUCCESS) l->type = cudaDataType(t);
      return st;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set_attr(&l->order, buf, size, "LAYOUT_ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_attr(&l->rows, buf, size, "LAYOUT_ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_attr(&l->cols, buf, size, "LAYOUT_COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_attr(&l->ld, buf, size, "LAYOUT_LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return set_attr(&l->batch, buf, size, "LAYOUT_BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return set_attr(&l->stride, buf, size, "LAYOUT_STRIDED_BATCH_OFFSET");
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "matrix layout attribute " + std::to_string(int(attr)) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  auto* o = new cublasLtMatmulDescOpaque_t{};
  Desc* d = new (o->data) Desc;
  d->compute = compute;
  d->scale = scale;
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t h,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  Desc* d = D(h);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set_attr(&d->compute, buf, size, "COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_attr(&d->scale, buf, size, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return set_attr(&d->pointer_mode, buf, size, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_attr(&d->transa, buf, size, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_attr(&d->transb, buf, size, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_attr(&d->epilogue, buf, size, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return set_attr(&d->a_scale, buf, size, "A_SCALE_POINTER");
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return set_attr(&d->b_scale, buf, size, "B_SCALE_POINTER");
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return set_attr(&d->fast_accum, buf, size, "FAST_ACCUM");
    default:
      d->unsupported_set = true;
      d->unsupported_attr = int32_t(attr);
      return CUBLAS_STATUS_SUCCESS;  // refused when used, as an unsupported configuration
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  auto* o = new cublasLtMatmulPreferenceOpaque_t{};
  new (o->data) Pref;
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t h,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  Pref* p = P(h);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set_attr(&p->workspace, buf, size, "PREF_MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return set_attr(&p->align[0], buf, size, "PREF_MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return set_attr(&p->align[1], buf, size, "PREF_MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return set_attr(&p->align[2], buf, size, "PREF_MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return set_attr(&p->align[3], buf, size, "PREF_MIN_ALIGNMENT_D_BYTES");
    default: {
      uint64_t ignored = 0;
      (void)ignored;
      return CUBLAS_STATUS_SUCCESS;  // search hints: no effect on results
    }
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* count) {
  if (!h || !op || !a || !b || !c || !d || !pref) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested < 1 || !results || !count) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  *count = 0;
  if (cublasStatus_t st = check_problem(*D(op), *L(a), *L(b), *L(c), *L(d), &m, &n, &k)) return st;
  std::memset(&results[0], 0, sizeof(results[0]));
  Algo al;
  al.magic = kAlgoMagic;
  for (int i = 0; i < 4; ++i) al.align[i] = P(pref)->align[i];
  std::memcpy(results[0].algo.data, &al, sizeof(al));
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t adesc, const void* B,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t cdesc, void* Dp,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!h || !op || !adesc || !bdesc || !cdesc || !ddesc) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is null");
  Call x;
  x.d = *D(op);
  x.a = *L(adesc);
  x.b = *L(bdesc);
  x.c = *L(cdesc);
  x.dd = *L(ddesc);
  if (cublasStatus_t st = check_problem(x.d, x.a, x.b, x.c, x.dd, &x.m, &x.n, &x.k)) return st;
  if (C == Dp && (x.c.ld != x.dd.ld || x.c.order != x.dd.order))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "in-place matmul (C == D) needs identical C and D layouts");
  if (x.m == 0 || x.n == 0) return CUBLAS_STATUS_SUCCESS;
  if (x.k == 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, "k == 0 is not emulated");
  if (algo) {
    Algo al;
    std::memcpy(&al, algo->data, sizeof(al));
    if (al.magic != kAlgoMagic)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "algo was not produced by the heuristic");
    const void* ptrs[4] = {A, B, C, Dp};
    const char* names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i)
      if (al.align[i] && reinterpret_cast<uintptr_t>(ptrs[i]) % al.align[i] != 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      std::string("matrix ") + names[i] + " is less aligned than the " +
                          std::to_string(al.align[i]) +
                          " bytes the algorithm was chosen for (MIN_ALIGNMENT preference)");
  }
  const int dev = h->device;
  if (cublasStatus_t st = check_operand(A, x.a, dev, "A")) return st;
  if (cublasStatus_t st = check_operand(B, x.b, dev, "B")) return st;
  x.alpha = *static_cast<const float*>(alpha);  // host pointer mode: read at the call
  x.beta = *static_cast<const float*>(beta);
  if (is_fp8(x.a.type)) {
    if ((x.a.batch > 1 || x.b.batch > 1))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "batched FP8 matmuls are not emulated");
    if (reinterpret_cast<uintptr_t>(A) % 16 != 0 || reinterpret_cast<uintptr_t>(B) % 16 != 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "FP8 A and B must be 16-byte aligned");
    for (const void* sp : {x.d.a_scale, x.d.b_scale})
      if (sp) {
        const Region r = classify(sp, sizeof(float));
        if (!r.known || r.kind != MemKind::kDevice || r.device != dev)
          return refuse(CUBLAS_STATUS_INVALID_VALUE, "an FP8 scale pointer is not device memory");
      }
  }
  if (x.beta != 0.0f || C == Dp)
    if (cublasStatus_t st = check_operand(C, x.c, dev, "C")) return st;
  if (cublasStatus_t st = check_operand(Dp, x.dd, dev, "D")) return st;
  if (workspace_bytes > 0) {
    const Region r = classify(workspace, workspace_bytes);
    if (!r.known || r.kind != MemKind::kDevice)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "workspace is not device memory of its size");
  }
  Stream* s = resolve(stream);
  if (!s) return refuse(CUBLAS_STATUS_INVALID_VALUE, "not a live stream");
  if (stream_device(s) != dev)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "stream of another device than the handle's");
  x.A = A;
  x.B = B;
  x.C = C;
  x.Dp = Dp;
  enqueue(s, [x] {
    // The scales are device values: read when the matmul runs, in stream order, into a copy of
    // the call (a CUDA graph runs this operation again at every replay: the recorded call must
    // stay as it was captured).
    Call run = x;
    if (run.d.a_scale) run.alpha *= *static_cast<const float*>(run.d.a_scale);
    if (run.d.b_scale) run.alpha *= *static_cast<const float*>(run.d.b_scale);
    execute(run);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
