// Device dispatch for the tensor-level ops; CPU implementations call cpu_kernels.
#include "core/ops.h"

#include <cstring>

#include "core/cpu_kernels.h"

namespace vt::ops {

namespace {
void require_cpu(const Tensor& t, const char* op) {
  VT_CHECK_MSG(t.device() == Device::kCPU, op << ": no backend for this device yet");
  VT_CHECK_MSG(t.dtype() == DType::kF32, op << ": expects f32, got " << dtype_name(t.dtype()));
}
}  // namespace

int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

void matmul(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate) {
  require_cpu(x, "matmul");
  VT_CHECK(w.ndim() == 2);
  const int64_t K = w.dim(0), N = w.dim(1), M = x.numel() / K;
  VT_CHECK_MSG(x.numel() == M * K && y.numel() == M * N,
               "matmul shapes x" << shape_str(x.shape()) << " w" << shape_str(w.shape()) << " y"
                                 << shape_str(y.shape()));
  cpu::gemm<float>(false, false, M, N, K, 1.0f, x.f32(), K, w.f32(), N, accumulate ? 1.0f : 0.0f,
                   y.f32(), N);
}

void matmul_dx(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) {
  require_cpu(dy, "matmul_dx");
  VT_CHECK(w.ndim() == 2);
  const int64_t K = w.dim(0), N = w.dim(1), M = dy.numel() / N;
  VT_CHECK_MSG(dy.numel() == M * N && dx.numel() == M * K,
               "matmul_dx shapes dy" << shape_str(dy.shape()) << " w" << shape_str(w.shape())
                                     << " dx" << shape_str(dx.shape()));
  cpu::gemm<float>(false, true, M, K, N, 1.0f, dy.f32(), N, w.f32(), N, accumulate ? 1.0f : 0.0f,
                   dx.f32(), K);
}

void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw) {
  require_cpu(x, "matmul_dw");
  VT_CHECK(dw.ndim() == 2);
  const int64_t K = dw.dim(0), N = dw.dim(1), M = x.numel() / K;
  VT_CHECK_MSG(x.numel() == M * K && dy.numel() == M * N,
               "matmul_dw shapes x" << shape_str(x.shape()) << " dy" << shape_str(dy.shape())
                                    << " dw" << shape_str(dw.shape()));
  cpu::gemm<float>(true, false, K, N, M, 1.0f, x.f32(), K, dy.f32(), N, 1.0f, dw.f32(), N);
}

void axpy(const Tensor& y, const Tensor& x, float alpha) {
  require_cpu(y, "axpy");
  VT_CHECK(y.numel() == x.numel());
  float* yp = y.f32();
  const float* xp = x.f32();
  const int64_t n = y.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) yp[i] += alpha * xp[i];
}

void scale_copy(const Tensor& y, const Tensor& x, float alpha) {
  require_cpu(y, "scale_copy");
  VT_CHECK(y.numel() == x.numel());
  float* yp = y.f32();
  const float* xp = x.f32();
  const int64_t n = y.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) yp[i] = alpha * xp[i];
}

double dot(const Tensor& a, const Tensor& b) {
  require_cpu(a, "dot");
  VT_CHECK(a.numel() == b.numel());
  const float* ap = a.f32();
  const float* bp = b.f32();
  double s = 0.0;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(ap[i]) * bp[i];
  return s;
}

void copy(const Tensor& y, const Tensor& x) {
  VT_CHECK(y.numel() == x.numel() && y.dtype() == x.dtype());
  if (y.raw() != x.raw() && y.numel() > 0) std::memcpy(y.raw(), x.raw(), y.nbytes());
}

}  // namespace vt::ops

namespace vt::ops {

void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, float scale, double eps) {
  require_cpu(x, "rmsnorm");
  const int64_t C = x.dim(-1), R = rows_of(x);
  VT_CHECK(y.numel() == x.numel() && rstd.numel() == R);
  cpu::rmsnorm_forward<float>(x.f32(), y.f32(), rstd.f32(), R, C, scale, eps);
}

void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      float scale, bool accumulate) {
  require_cpu(x, "rmsnorm_backward");
  const int64_t C = x.dim(-1), R = rows_of(x);
  VT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && rstd.numel() == R);
  cpu::rmsnorm_backward<float>(x.f32(), rstd.f32(), dy.f32(), dx.f32(), R, C, scale, accumulate);
}

void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset) {
  require_cpu(x, "rope");
  VT_CHECK(x.ndim() == 4 && y.numel() == x.numel());
  cpu::rope_forward<float>(x.f32(), y.f32(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), base,
                           pos_offset);
}

void rope_backward(const Tensor& dy, const Tensor& dx, double base, int64_t pos_offset) {
  require_cpu(dy, "rope_backward");
  VT_CHECK(dy.ndim() == 4 && dx.numel() == dy.numel());
  cpu::rope_backward<float>(dy.f32(), dx.f32(), dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3), base,
                            pos_offset);
}

static cpu::AttnShape attn_shape(const Tensor& q, const Tensor& k, int64_t window) {
  VT_CHECK(q.ndim() == 4 && k.ndim() == 4);
  cpu::AttnShape s;
  s.B = q.dim(0);
  s.T = q.dim(1);
  s.H = q.dim(2);
  s.hd = q.dim(3);
  s.Hkv = k.dim(2);
  s.window = window;
  VT_CHECK(k.dim(0) == s.B && k.dim(1) == s.T && k.dim(3) == s.hd && s.H % s.Hkv == 0);
  return s;
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, int64_t window, float scale) {
  require_cpu(q, "attention");
  auto s = attn_shape(q, k, window);
  VT_CHECK(v.numel() == k.numel() && out.numel() == q.numel() && lse.numel() == s.B * s.H * s.T);
  cpu::attention_forward<float>(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), s, scale);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, int64_t window, float scale) {
  require_cpu(q, "attention_backward");
  auto s = attn_shape(q, k, window);
  VT_CHECK(dq.numel() == q.numel() && dk.numel() == k.numel() && dv.numel() == v.numel());
  cpu::attention_backward<float>(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), dout.f32(),
                                 dq.f32(), dk.f32(), dv.f32(), s, scale);
}

void relu2(const Tensor& x, const Tensor& y) {
  require_cpu(x, "relu2");
  VT_CHECK(y.numel() == x.numel());
  cpu::relu2_forward<float>(x.f32(), y.f32(), x.numel());
}

void relu2_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) {
  require_cpu(x, "relu2_backward");
  VT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel());
  cpu::relu2_backward<float>(x.f32(), dy.f32(), dx.f32(), x.numel(), accumulate);
}

void embedding(const Tensor& table, int64_t row_begin, const int32_t* ids, const Tensor& out) {
  require_cpu(table, "embedding");
  const int64_t C = table.dim(-1);
  VT_CHECK(out.dim(-1) == C);
  cpu::embedding_forward<float>(table.f32(), row_begin, table.dim(0), C, ids, rows_of(out),
                                out.f32());
}

void embedding_backward(const Tensor& dout, const int32_t* ids, int64_t row_begin,
                        const Tensor& dtable) {
  require_cpu(dout, "embedding_backward");
  const int64_t C = dtable.dim(-1);
  VT_CHECK(dout.dim(-1) == C);
  cpu::embedding_backward<float>(dout.f32(), ids, rows_of(dout), row_begin, dtable.dim(0), C,
                                 dtable.f32());
}

}  // namespace vt::ops
