// The smear gate's registration, forward, backward and decode step (see smear_gate.h).
#include "model/smear_gate.h"

#include <cmath>

#include "core/check.h"
#include "core/ops.h"
#include "model/param_registrar.h"

namespace vt::smear {

Params register_params(ParamRegistrar& r) {
  VT_CHECK_MSG(r.config().n_embd >= kChannels,
               "the smear gate reads the first " << kChannels << " channels");
  Params p;
  // nanochat's gpt.py init_weights: smear_gate.weight ~ U(0, 0.02), smear_lambda = 0.
  p.gate_w = r.add("smear.gate_w", {kChannels, 1}, ParamGroup::kSmear, -1,
                   InitRule::uniform(0.0, 0.02), {});
  p.lambda = r.add("smear.lambda", {1}, ParamGroup::kSmear, -1, InitRule::zeros(), {});
  return p;
}

namespace {
// Copies src rows [0, T-1) of every batch row into dst rows [1, T) (shift = +1), or the reverse
// accumulation for backward: dst rows [0, T-1) += src rows [1, T).
void shift_rows(const Tensor& dst, const Tensor& src, int B, int T, int64_t C, bool backward) {
  const int64_t n = static_cast<int64_t>(T - 1) * C;
  if (n == 0) return;
  for (int b = 0; b < B; ++b) {
    const int64_t row = static_cast<int64_t>(b) * T * C;
    if (backward)
      ops::axpy(dst.flat(row, n), src.flat(row + C, n));
    else
      ops::copy(dst.flat(row + C, n), src.flat(row, n));
  }
}
}  // namespace

Tensor forward(const ParamStore& store, const Params& p, int B, int T, const Tensor& x, Acts& a) {
  const int64_t N = static_cast<int64_t>(B) * T, C = x.dim(-1);
  a.x = x;
  a.prev = Tensor::zeros(x.shape(), x.dtype(), x.device());
  shift_rows(a.prev, x, B, T, C, false);
  // g = sigmoid(x[:, :24] w)
  a.g = Tensor::zeros({N}, DType::kF32, x.device());
  GemmArgs g;
  g.M = N, g.N = 1, g.K = kChannels;
  g.A = x, g.lda = C;
  g.B = store.compute_param(p.gate_w), g.ldb = 1;
  g.C = a.g, g.ldc = 1;
  ops::gemm(g);
  ops::gate_sigmoid(a.g, 1.0f);
  a.ge = Tensor::zeros({N}, DType::kF32, x.device());
  ops::scale_copy_coef(a.ge, a.g, store.param(p.lambda));
  Tensor y = Tensor::zeros(x.shape(), x.dtype(), x.device());
  ops::gated_mix(x, a.prev, a.ge, y);  // y = x + ge * prev, one gate per position
  return y;
}

Tensor backward(const ParamStore& store, const Params& p, int B, int T, const Acts& a,
                const Tensor& dy) {
  const int64_t N = static_cast<int64_t>(B) * T, C = dy.dim(-1);
  const Device dev = dy.device();
  Tensor dx = Tensor::zeros(dy.shape(), dy.dtype(), dev);
  ops::copy(dx, dy);
  Tensor dprev = Tensor::zeros(dy.shape(), dy.dtype(), dev);
  Tensor dge = Tensor::zeros({N}, DType::kF32, dev);
  ops::gated_mix_backward(dy, a.prev, a.ge, dprev, dge);  // dprev = ge dy, dge = dy . prev
  shift_rows(dx, dprev, B, T, C, true);
  // ge = lambda g: d lambda += sum(dge g); dg = lambda dge.
  Tensor dl = Tensor::zeros({1}, DType::kF32, dev);
  ops::dot_into(dge, a.g, dl);
  ops::axpy(store.grad(p.lambda), dl);
  Tensor dg = Tensor::zeros({N}, DType::kF32, dev);
  ops::scale_copy_coef(dg, dge, store.param(p.lambda));
  Tensor dz = Tensor::zeros({N}, dy.dtype(), dev);
  ops::gate_sigmoid_backward(a.g, dg, 1.0f, dz);  // dz = dg g (1 - g)
  // d w += x[:, :24]^T dz; d x[:, :24] += dz w^T
  GemmArgs gw;
  gw.trans_a = true;
  gw.M = kChannels, gw.N = 1, gw.K = N;
  gw.A = a.x, gw.lda = C;
  gw.B = dz, gw.ldb = 1;
  gw.C = store.grad(p.gate_w), gw.ldc = 1;
  gw.beta = 1.0f;
  ops::gemm(gw);
  GemmArgs gx;
  gx.trans_b = true;
  gx.M = N, gx.N = kChannels, gx.K = 1;
  gx.A = dz, gx.lda = 1;
  gx.B = store.compute_param(p.gate_w), gx.ldb = 1;
  gx.C = dx, gx.ldc = C;
  gx.beta = 1.0f;
  ops::gemm(gx);
  return dx;
}

void decode_step(const ParamStore& store, const Params& p, float* x, const float* prev, int C) {
  const Tensor w = store.param(p.gate_w), lam = store.param(p.lambda);
  VT_CHECK(w.device() == Device::kCPU && lam.device() == Device::kCPU);
  double z = 0;
  for (int c = 0; c < kChannels; ++c) z += static_cast<double>(x[c]) * w.f32()[c];
  const double ge = static_cast<double>(lam.f32()[0]) / (1.0 + std::exp(-z));
  for (int c = 0; c < C; ++c) x[c] = static_cast<float>(x[c] + ge * prev[c]);
}

}  // namespace vt::smear
