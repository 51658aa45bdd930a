// V and O projections (see projection.h).
#include "model/projection.h"

#include "core/ops.h"
#include "model/linear.h"
#include "parallel/tensor_parallel.h"

namespace vt::projection {

namespace {

Tensor P(const GPT& m, int i) { return m.store()->param(i); }
Tensor G(const GPT& m, int i) { return m.store()->grad(i); }
Tensor W(const GPT& m, int i) { return m.store()->compute_param(i); }

// d param[0] += sum(a * b) over the TP group (a, b hold this rank's heads).
void grad_gain_tp(const GPT& m, int param, const Tensor& a, const Tensor& b) {
  Tensor s = Tensor::zeros({1}, DType::kF32, a.device());
  ops::dot_into(a, b, s);
  tp::reduce_replicated_grad(m.parallel().tp_comm(), s);
  ops::axpy(G(m, param), s, 1.0f);
}

// The GEMM operand of s W0 + r dW: f32, or bf16 when activations are bf16.
Tensor gemm_matrix(const GPT& m, const Tensor& eff) {
  if (m.act_dtype() == DType::kF32) return eff;
  Tensor c = Tensor::zeros(eff.shape(), m.act_dtype(), eff.device());
  ops::copy(c, eff);
  return c;
}

// Gradients of a reparameterized projection from dW_eff (f32, local shape).
void reparam_grads(const GPT& m, const Projection& p, const Tensor& dweff) {
  ops::axpy_coef(G(m, p.w), dweff, P(m, p.resid));
  grad_gain_tp(m, p.skip, dweff, p.base);
  grad_gain_tp(m, p.resid, dweff, P(m, p.w));
}

}  // namespace

Tensor effective_matrix(const GPT& m, const Projection& p) {
  Tensor eff = Tensor::zeros(p.base.shape(), DType::kF32, p.base.device());
  ops::scale_copy_coef(eff, p.base, P(m, p.skip));
  ops::axpy_coef(eff, P(m, p.w), P(m, p.resid));
  return eff;
}

void forward_in(const GPT& m, const Projection& p, const Tensor& x, const Tensor& out) {
  switch (p.kind) {
    case Projection::Kind::kMatrix: linear::forward(m, x, W(m, p.w), out); return;
    case Projection::Kind::kIdentity: {
      const int64_t N = ops::rows_of(x), C = x.dim(-1), K = out.numel() / N;
      ops::copy_2d(out, 0, K, x, K * m.parallel().tp_rank(), C, N, K);
      if (p.skip >= 0) ops::scale_copy_coef(out, out, P(m, p.skip));
      return;
    }
    case Projection::Kind::kReparam:
      linear::forward(m, x, gemm_matrix(m, effective_matrix(m, p)), out);
      return;
    case Projection::Kind::kNone: break;
  }
  VT_CHECK_MSG(false, "forward through an absent projection");
}

void backward_in(const GPT& m, const Projection& p, const Tensor& x, const Tensor& d,
                 const Tensor& dx, bool accumulate) {
  switch (p.kind) {
    case Projection::Kind::kMatrix:
      linear::backward_dw(m, x, d, p.w);
      linear::backward_dx(m, d, W(m, p.w), dx, accumulate);
      return;
    case Projection::Kind::kIdentity: {
      const int64_t N = ops::rows_of(x), C = x.dim(-1), K = d.numel() / N;
      const int64_t col = K * m.parallel().tp_rank();
      Tensor full = Tensor::zeros({N, C}, d.dtype(), d.device());
      ops::copy_2d(full, col, C, d, 0, K, N, K);
      if (!accumulate) Tensor(dx).zero_();
      if (p.skip < 0) {  // the plain identity: no gain
        ops::axpy(dx, full, 1.0f);
        return;
      }
      Tensor xs = Tensor::zeros({N, K}, x.dtype(), x.device());
      ops::copy_2d(xs, 0, K, x, col, C, N, K);
      grad_gain_tp(m, p.skip, d, xs);
      ops::axpy_coef(dx, full, P(m, p.skip));
      return;
    }
    case Projection::Kind::kReparam: {
      const Tensor eff = effective_matrix(m, p);
      Tensor dweff = Tensor::zeros(eff.shape(), DType::kF32, eff.device());
      linear::backward_dw(m, x, d, dweff);
      reparam_grads(m, p, dweff);
      linear::backward_dx(m, d, gemm_matrix(m, eff), dx, accumulate);
      return;
    }
    case Projection::Kind::kNone: break;
  }
  VT_CHECK_MSG(false, "backward through an absent projection");
}

void forward_out(const GPT& m, const Projection& p, const Tensor& y, const Tensor& o) {
  switch (p.kind) {
    case Projection::Kind::kMatrix: linear::forward(m, y, W(m, p.w), o); return;
    case Projection::Kind::kIdentity: {
      const int64_t N = ops::rows_of(y), Q = y.dim(-1), C = o.dim(-1);
      Tensor(o).zero_();
      ops::copy_2d(o, Q * m.parallel().tp_rank(), C, y, 0, Q, N, Q);
      if (p.skip >= 0) ops::scale_copy_coef(o, o, P(m, p.skip));
      return;
    }
    case Projection::Kind::kReparam:
      linear::forward(m, y, gemm_matrix(m, effective_matrix(m, p)), o);
      return;
    case Projection::Kind::kNone: break;
  }
  VT_CHECK_MSG(false, "forward through an absent projection");
}

void backward_out(const GPT& m, const Projection& p, const Tensor& y, const Tensor& dout,
                  const Tensor& dy) {
  switch (p.kind) {
    case Projection::Kind::kMatrix:
      linear::backward_dw(m, y, dout, p.w);
      linear::backward_dx(m, dout, W(m, p.w), dy, false);
      return;
    case Projection::Kind::kIdentity: {
      const int64_t N = ops::rows_of(y), Q = y.dim(-1), C = dout.dim(-1);
      ops::copy_2d(dy, 0, Q, dout, Q * m.parallel().tp_rank(), C, N, Q);
      if (p.skip < 0) return;  // the plain identity: no gain
      grad_gain_tp(m, p.skip, dy, y);
      ops::scale_copy_coef(dy, dy, P(m, p.skip));
      return;
    }
    case Projection::Kind::kReparam: {
      const Tensor eff = effective_matrix(m, p);
      Tensor dweff = Tensor::zeros(eff.shape(), DType::kF32, eff.device());
      linear::backward_dw(m, y, dout, dweff);
      reparam_grads(m, p, dweff);
      linear::backward_dx(m, dout, gemm_matrix(m, eff), dy, false);
      return;
    }
    case Projection::Kind::kNone: break;
  }
  VT_CHECK_MSG(false, "backward through an absent projection");
}

}  // namespace vt::projection
