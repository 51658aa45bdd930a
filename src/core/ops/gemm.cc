// The GEMM op family (core/ops/gemm.h): shape checks of the matmuls, the host GEMM and the
// cuBLASLt call.
#include "core/ops/gemm.h"

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_gemm.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/elementwise.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

// The addend's checks: C's dtype, device and number of elements (C's layout applies to both), no
// overlap with C.
void check_addend(const GemmArgs& g) {
  const Tensor& a = g.addend;
  VT_CHECK_MSG(a.dtype() == g.C.dtype(), "gemm: the addend must have C's dtype, got "
                                             << dtype_name(a.dtype()) << " and "
                                             << dtype_name(g.C.dtype()));
  VT_CHECK_MSG(a.device() == g.C.device(), "gemm: the addend and C on different devices");
  VT_CHECK_MSG(a.numel() == g.C.numel(),
               "gemm: the addend holds " << a.numel() << " elements, C " << g.C.numel());
  const char* ab = static_cast<const char*>(a.raw());
  const char* cb = static_cast<const char*>(g.C.raw());
  VT_CHECK_MSG(ab + a.nbytes() <= cb || cb + g.C.nbytes() <= ab,
               "gemm: the addend overlaps C");
}

// A strided batch: a positive count, and each operand holding its last problem (the elements a
// row-major rows x cols matrix with leading dimension ld spans, past (batch - 1) * stride);
// C's problems may not overlap (stride_c at least C's span).
void check_batch(const GemmArgs& g) {
  VT_CHECK_MSG(g.batch >= 1, "gemm: batch count " << g.batch << " must be >= 1");
  if (g.batch == 1) return;
  VT_CHECK_MSG(g.K > 0, "gemm: a batched GEMM needs K > 0");
  auto span = [](int64_t rows, int64_t cols, int64_t ld) {
    return rows == 0 || cols == 0 ? int64_t{0} : (rows - 1) * ld + cols;
  };
  const int64_t sa = span(g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.lda);
  const int64_t sb = span(g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.ldb);
  const int64_t sc = span(g.M, g.N, g.ldc);
  VT_CHECK_MSG(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_c >= sc,
               "gemm: batch strides " << g.stride_a << ", " << g.stride_b << ", " << g.stride_c
                                      << " (C's problems span " << sc << " elements each)");
  const int64_t last = g.batch - 1;
  VT_CHECK_MSG(g.A.numel() >= last * g.stride_a + sa && g.B.numel() >= last * g.stride_b + sb &&
                   g.C.numel() >= last * g.stride_c + sc,
               "gemm: a batch of " << g.batch << " needs A, B, C of at least "
                                   << last * g.stride_a + sa << ", " << last * g.stride_b + sb
                                   << ", " << last * g.stride_c + sc << " elements, got "
                                   << g.A.numel() << ", " << g.B.numel() << ", " << g.C.numel());
}

}  // namespace

void gemm(const GemmArgs& g) {
  if (g.fp8_a != Fp8Format::kNone || g.fp8_b != Fp8Format::kNone) {
    VT_CHECK_MSG(g.batch == 1, "gemm: an FP8 GEMM is not batched (batch " << g.batch << ")");
    return gemm_fp8(g);
  }
  const bool addend = g.addend.defined();
  if (addend) check_addend(g);
  check_batch(g);
  const double flops = 2.0 * g.M * g.N * g.K * g.batch;
  auto d = addend ? on("gemm", {&g.A, &g.B, &g.C, &g.addend}, flops)
                  : on("gemm", {&g.A, &g.B, &g.C}, flops);
  if (g.M == 0 || g.N == 0) return;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const DType ta = g.A.dtype(), tb = g.B.dtype(), tc = g.C.dtype();
    VT_CHECK_MSG(ta == tb, "gemm: A and B must have one dtype");
    VT_CHECK_MSG((ta == DType::kF32 && tc == DType::kF32) ||
                     (ta == DType::kBF16 && (tc == DType::kBF16 || tc == DType::kF32)),
                 "gemm: supported dtypes are f32 x f32 -> f32 and bf16 x bf16 -> bf16 or f32, got "
                     << dtype_name(ta) << " x " << dtype_name(tb) << " -> " << dtype_name(tc));
    if (g.K == 0) {  // C = beta * C, or beta * addend (cuBLASLt is not asked to handle K = 0)
      if (addend) g.C.copy_from(g.addend);
      if (tc == DType::kF32)
        cuda::scale_matrix(f32p(g.C), g.M, g.N, g.ldc, g.beta, s);
      else
        cuda::scale_matrix(bf16p(g.C), g.M, g.N, g.ldc, g.beta, s);
      return;
    }
    cuda::Gemm& mm = rt->gemm();
    const cuda::GemmBatch batch{g.batch, g.stride_a, g.stride_b, g.stride_c};
    if (ta == DType::kF32) {
      mm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, f32p(g.A), g.lda, f32p(g.B), g.ldb, g.beta,
         f32p(g.C), g.ldc, s, addend ? f32p(g.addend) : nullptr, batch);
    } else if (tc == DType::kBF16) {
      mm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, bf16p(g.A), g.lda, bf16p(g.B), g.ldb,
         g.beta, bf16p(g.C), g.ldc, s, addend ? bf16p(g.addend) : nullptr, batch);
    } else {
      mm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, bf16p(g.A), g.lda, bf16p(g.B), g.ldb,
         g.beta, f32p(g.C), g.ldc, s, addend ? f32p(g.addend) : nullptr, batch);
    }
    return;
  }
#endif
  // Host: the addend copied into C, then the in-place GEMM (the same bits).
  if (addend) g.C.copy_from(g.addend);
  const bool bf = g.A.dtype() == DType::kBF16;
  VT_CHECK_MSG(bf == (g.B.dtype() == DType::kBF16), "gemm: A and B must have one dtype");
  VT_CHECK_MSG(bf || g.C.dtype() == DType::kF32, "gemm: f32 A/B need an f32 C");
  host::In a(g.A), b(g.B);
  host::InOut c(g.C);
  for (int64_t i = 0; i < g.batch; ++i)  // each problem the unbatched call
    cpu::gemm<float>(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, a.p() + i * g.stride_a, g.lda,
                     b.p() + i * g.stride_b, g.ldb, g.beta, c.p() + i * g.stride_c, g.ldc);
}

void matmul(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate) {
  VT_CHECK(w.ndim() == 2);
  const int64_t K = w.dim(0), N = w.dim(1), M = x.numel() / K;
  VT_CHECK_MSG(x.numel() == M * K && y.numel() == M * N,
               "matmul shapes x" << shape_str(x.shape()) << " w" << shape_str(w.shape()) << " y"
                                 << shape_str(y.shape()));
  GemmArgs g;
  g.M = M, g.N = N, g.K = K;
  g.A = x, g.B = w, g.C = y;
  g.lda = K, g.ldb = N, g.ldc = N;
  g.beta = accumulate ? 1.0f : 0.0f;
  gemm(g);
}

void matmul_dx(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) {
  VT_CHECK(w.ndim() == 2);
  const int64_t K = w.dim(0), N = w.dim(1), M = dy.numel() / N;
  VT_CHECK_MSG(dy.numel() == M * N && dx.numel() == M * K,
               "matmul_dx shapes dy" << shape_str(dy.shape()) << " w" << shape_str(w.shape())
                                     << " dx" << shape_str(dx.shape()));
  GemmArgs g;
  g.trans_b = true;
  g.M = M, g.N = K, g.K = N;
  g.A = dy, g.B = w, g.C = dx;
  g.lda = N, g.ldb = N, g.ldc = K;
  g.beta = accumulate ? 1.0f : 0.0f;
  gemm(g);
}

void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw, bool accumulate) {
  VT_CHECK(dw.ndim() == 2);
  need_f32("matmul_dw", dw, "the weight gradient");
  const int64_t K = dw.dim(0), N = dw.dim(1), M = x.numel() / K;
  VT_CHECK_MSG(x.numel() == M * K && dy.numel() == M * N,
               "matmul_dw shapes x" << shape_str(x.shape()) << " dy" << shape_str(dy.shape())
                                    << " dw" << shape_str(dw.shape()));
  GemmArgs g;
  g.trans_a = true;
  g.M = K, g.N = N, g.K = M;
  g.A = x, g.B = dy, g.C = dw;
  g.lda = K, g.ldb = N, g.ldc = N;
  g.beta = accumulate ? 1.0f : 0.0f;  // beta 0: dw's old values are never read
  gemm(g);
}

}  // namespace vt::ops
