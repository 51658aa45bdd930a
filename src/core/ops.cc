// Checks and device dispatch for the ops declared in ops.h itself: dense algebra, copies,
// reductions (the other families: core/ops/*.cc).
#include "core/ops.h"

#include <initializer_list>

#include "core/op_profile.h"
#include "core/ops/dispatch.h"

namespace vt::ops {

using namespace detail;

int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

void gemm(const GemmArgs& g) {
  auto b = on("gemm", {&g.A, &g.B, &g.C}, 2.0 * g.M * g.N * g.K);
  if (g.M == 0 || g.N == 0) return;
  b->gemm(g);
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

void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw) {
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
  g.beta = 1.0f;
  gemm(g);
}

void axpy(const Tensor& y, const Tensor& x, float alpha) {
  VT_CHECK_MSG(y.numel() == x.numel(), "axpy: " << y.numel() << " vs " << x.numel() << " elements");
  VT_CHECK_MSG(y.dtype() == x.dtype(), "axpy: dtypes differ");
  need_float("axpy", y);
  if (y.numel() == 0) return;
  on("axpy", {&y, &x})->axpy(y, x, alpha);
}

void scale_copy(const Tensor& y, const Tensor& x, float alpha) {
  VT_CHECK_MSG(y.numel() == x.numel(), "scale_copy: element counts differ");
  VT_CHECK_MSG(y.dtype() == x.dtype(), "scale_copy: dtypes differ");
  need_float("scale_copy", y);
  if (y.numel() == 0) return;
  on("scale_copy", {&y, &x})->scale_copy(y, x, alpha);
}

double dot(const Tensor& a, const Tensor& b) {
  VT_CHECK(a.numel() == b.numel());
  need_float("dot", a);
  need_float("dot", b);
  return a.numel() == 0 ? 0.0 : on("dot", {&a, &b})->dot(a, b);
}

double sum_squares(const Tensor& x) {
  need_float("sum_squares", x);
  return x.numel() == 0 ? 0.0 : on("sum_squares", {&x})->sum_squares(x);
}

double sum_squares_list(const std::vector<Tensor>& xs) {
  if (xs.empty()) return 0.0;
  for (const Tensor& x : xs) {
    need_float("sum_squares_list", x);
    VT_CHECK_MSG(x.device() == xs[0].device(), "sum_squares_list: tensors on different devices");
  }
  return backend(xs[0].device()).sum_squares_list(xs);
}

void copy(const Tensor& y, const Tensor& x) {
  VT_CHECK_MSG(y.numel() == x.numel(), "copy: " << y.numel() << " vs " << x.numel() << " elements");
  if (y.numel() == 0) return;
  if (y.dtype() == x.dtype()) {
    y.copy_from(x);
    return;
  }
  if (y.device() == x.device()) {
    on("copy", {&y, &x})->cast(y, x);
    return;
  }
  y.copy_from(x.to(y.device(), y.dtype()));
}

void add_scalar(const Tensor& t, int64_t index, double value) {
  need_f32("add_scalar", t, "the tensor");
  VT_CHECK(index >= 0 && index < t.numel());
  on("add_scalar", {&t})->add_scalar(t, index, value);
}

static void check_coef(const char* op, const Tensor& coef, int64_t index) {
  need_f32(op, coef, "the coefficient");
  VT_CHECK_MSG(index >= 0 && index < coef.numel(),
               op << ": coefficient index " << index << " outside " << coef.numel());
}

void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) {
  VT_CHECK_MSG(y.numel() == x.numel() && y.dtype() == x.dtype(), "scale_copy_coef: y and x differ");
  need_float("scale_copy_coef", y);
  check_coef("scale_copy_coef", coef, index);
  if (y.numel() == 0) return;
  on("scale_copy_coef", {&y, &x, &coef})->scale_copy_coef(y, x, coef, index);
}

void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) {
  VT_CHECK_MSG(y.numel() == x.numel() && y.dtype() == x.dtype(), "axpy_coef: y and x differ");
  need_float("axpy_coef", y);
  check_coef("axpy_coef", coef, index);
  if (y.numel() == 0) return;
  on("axpy_coef", {&y, &x, &coef})->axpy_coef(y, x, coef, index);
}

void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index) {
  VT_CHECK(a.numel() == b.numel());
  need_float("dot_into", a);
  need_float("dot_into", b);
  check_coef("dot_into", out, index);
  on("dot_into", {&a, &b, &out})->dot_into(a, b, out, index);
}

void normalize_frobenius(const Tensor& x, double scale, double eps) {
  need_float("normalize_frobenius", x);
  if (x.numel() == 0) return;
  on("normalize_frobenius", {&x})->normalize_frobenius(x, scale, eps);
}

void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols) {
  VT_CHECK(x.numel() == rows * cols && y.numel() == rows * cols && x.dtype() == y.dtype());
  if (x.numel() == 0) return;
  on("transpose", {&y, &x})->transpose(y, x, rows, cols);
}

void copy_2d(const Tensor& dst, int64_t dst_offset, int64_t dst_ld, const Tensor& src,
             int64_t src_offset, int64_t src_ld, int64_t rows, int64_t cols) {
  VT_CHECK_MSG(dst.dtype() == src.dtype(), "copy_2d: dtypes differ");
  VT_CHECK(rows >= 0 && cols >= 0 && cols <= dst_ld && cols <= src_ld);
  if (rows == 0 || cols == 0) return;
  VT_CHECK_MSG(dst_offset + (rows - 1) * dst_ld + cols <= dst.numel() &&
                   src_offset + (rows - 1) * src_ld + cols <= src.numel(),
               "copy_2d out of bounds");
  const size_t es = dtype_size(dst.dtype());
  on("copy_2d", {&dst, &src})
      ->copy_2d(static_cast<char*>(dst.raw()) + dst_offset * es, dst_ld * es,
               static_cast<const char*>(src.raw()) + src_offset * es, src_ld * es, cols * es,
               rows);
}


}  // namespace vt::ops
