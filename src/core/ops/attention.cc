// The attention op family (core/ops/attention.h): checks, the composition of softmax attention
// with the mix, and the four pieces (attention forward/backward, mix forward/backward) on the
// host or launched on the CUDA runtime.
#include "core/ops/attention.h"

#include <memory>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/host_window.h"
#include "core/ops/rope.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/attention.cuh"
#include "kernels/attention_mix.cuh"
#include "kernels/attention_tc.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

void check_attn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse) {
  VT_CHECK(q.ndim() == 4 && k.ndim() == 4);
  VT_CHECK(k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3) &&
           q.dim(2) % k.dim(2) == 0);
  VT_CHECK(v.numel() == k.numel() && lse.numel() == q.dim(0) * q.dim(2) * q.dim(1));
  need_f32("attention", lse, "lse");
}

void check_extras(const Tensor& q, const Tensor& v, const AttnExtras& ex) {
  if (ex.bias.defined()) {
    need_f32("attention", ex.bias, "the bias");
    VT_CHECK_MSG(ex.bias.numel() == q.dim(1) * q.dim(1),
                 "attention bias has " << ex.bias.numel() << " elements, expected T*T = "
                                       << q.dim(1) * q.dim(1));
  }
  const AttnMix& m = ex.mix;
  if (!m.active()) return;
  for (const Tensor* g : {&m.alpha, &m.beta, &m.gamma})
    if (g->defined()) {
      need_f32("attention", *g, "a shaped-attention gain");
      VT_CHECK(g->numel() == q.dim(2));
    }
  VT_CHECK_MSG(m.lam == 0.0f || (m.v1.defined() && m.v1.numel() == v.numel()),
               "the NeuTRENO term needs v1 shaped like v");
  if (m.rowscale.defined()) {
    need_f32("attention", m.rowscale, "the E-SPA/U-SPA rowscale");
    VT_CHECK_MSG(m.rowscale.numel() == q.dim(1),
                 "the attention rowscale has " << m.rowscale.numel() << " elements, expected T = "
                                               << q.dim(1));
  }
  VT_CHECK_MSG(!m.centre_on_bias || (ex.bias.defined() && m.gamma.defined()),
               "a centring term on the bias needs the attention bias and the gamma gains");
  VT_CHECK_MSG(ex.soft.defined() && ex.soft.numel() == q.numel(),
               "a mixed attention needs `soft` shaped like its output");
}

#if VTRAIN_HAS_CUDA
// Whether an attention call runs on the tensor-core kernels: every tensor bf16 and 16-byte
// aligned, a head dim they handle, and not switched to the reference kernels.
bool use_tensor_core_attention(const CudaRuntime& rt, const cuda::AttnShape& s,
                               const std::vector<const Tensor*>& ts) {
  if (rt.attention_kernels() != CudaAttentionKernels::kTensorCores) return false;
  if (!cuda::attention_tc_supported(s)) return false;
  for (const Tensor* t : ts)
    if (t->dtype() != DType::kBF16 || reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0)
      return false;
  return true;
}
#endif

// bias: undefined, or f32 (T, T) added to the scaled scores (shared by batch and heads).
void forward(const Dispatch& d, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& out, const Tensor& lse, int64_t window, float scale,
             const Tensor& bias) {
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t st = rt->stream();
    if (q.numel() == 0) return;  // the kernels require every dimension >= 1
    const cuda::AttnShape s = attention_shape(q, k, window);
    float* l = f32_of(lse);
    const float* b = maybe_f32(bias);
    // The tensor-core kernels know no logit bias (E-SPA/U-SPA): those take the reference kernels.
    if (b == nullptr && use_tensor_core_attention(*rt, s, {&q, &k, &v, &out})) {
      cuda::attention_tc_forward(bf16p(q), bf16p(k), bf16p(v), bf16p(out), l, s, scale, st);
      return;
    }
    on_acts(
        st,
        [&](auto qp, auto kp, auto vp, auto op) {
          cuda::attention_forward(qp, kp, vp, op, l, s, scale, st, b);
        },
        in(q), in(k), in(v), Act{out, false, true});
    return;
  }
#endif
  host::In qp(q), kp(k), vp(v);
  host::Out op(out);
  cpu::attention_forward<float>(qp, kp, vp, op, host::f32_of(lse), attention_shape(q, k, window),
                                scale, host::maybe_f32(bias));
}

// Back through the RoPE + QK-norm in front of the attention, in place on dq and dk (the unfused
// half of AttnQkNormGrad, for the paths without the tensor-core epilogue).
void qk_norm_backward(const AttnQkNormGrad& qk, const Tensor& dq, const Tensor& dk) {
  if (!qk.active()) return;
  rope_rmsnorm_backward(qk.q, qk.rstd_q, dq, dq, qk.base, qk.scale);
  rope_rmsnorm_backward(qk.k, qk.rstd_k, dk, dk, qk.base, qk.scale);
}

void check_qk_norm_grad(const AttnQkNormGrad& qk, const Tensor& q, const Tensor& k) {
  if (!qk.active()) return;
  VT_CHECK_MSG(qk.k.defined() && qk.rstd_q.defined() && qk.rstd_k.defined(),
               "attention_backward: the QK-norm gradient needs q, k and both rstd");
  VT_CHECK_MSG(qk.q.shape() == q.shape() && qk.k.shape() == k.shape() &&
                   qk.q.dtype() == q.dtype() && qk.k.dtype() == k.dtype(),
               "attention_backward: the pre-RoPE q and k must be shaped and typed as the "
               "attention's q and k");
}

void backward(const Dispatch& d, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
              const Tensor& dk, const Tensor& dv, int64_t window, float scale,
              const Tensor& bias, const AttnQkNormGrad& qk) {
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t st = rt->stream();
    if (q.numel() == 0) return;
    const cuda::AttnShape s = attention_shape(q, k, window);
    const float* l = f32_of(lse);
    const float* b = maybe_f32(bias);
    // The workspace is reused by every call: safe because all calls are ordered on the stream.
    std::unique_lock<std::mutex> lock(rt->scratch_mutex());
    std::vector<const Tensor*> tc_tensors = {&q, &k, &v, &out, &dout, &dq, &dk, &dv};
    if (qk.active()) tc_tensors.insert(tc_tensors.end(), {&qk.q, &qk.k});
    if (b == nullptr && use_tensor_core_attention(*rt, s, tc_tensors)) {
      cuda::RopeNormGrad rn;
      if (qk.active()) {
        rn.q = {bf16p(qk.q), f32_of(qk.rstd_q)};
        rn.k = {bf16p(qk.k), f32_of(qk.rstd_k)};
        rn.table = rt->rope_table(s.hd, qk.base, s.T);
        rn.scale = qk.scale;
      }
      void* ws = rt->attention_workspace(cuda::attention_tc_backward_workspace_bytes(s));
      cuda::attention_tc_backward(bf16p(q), bf16p(k), bf16p(v), bf16p(out), l, bf16p(dout),
                                  bf16p(dq), bf16p(dk), bf16p(dv), s, scale, ws, st, rn);
      return;
    }
    void* ws = rt->attention_workspace(cuda::attention_backward_workspace_bytes(s));
    on_acts(
        st,
        [&](auto qp, auto kp, auto vp, auto op, auto dop, auto dqp, auto dkp, auto dvp) {
          cuda::attention_backward(qp, kp, vp, op, l, dop, dqp, dkp, dvp, s, scale, ws, st, b);
        },
        in(q), in(k), in(v), in(out), in(dout), Act{dq, false, true}, Act{dk, false, true},
        Act{dv, false, true});
    lock.unlock();
    qk_norm_backward(qk, dq, dk);
    return;
  }
#endif
  {
    host::In qp(q), kp(k), vp(v), op(out), dop(dout);
    host::Out dqp(dq), dkp(dk), dvp(dv);
    cpu::attention_backward<float>(qp, kp, vp, op, host::f32_of(lse), dop, dqp, dkp, dvp,
                                   attention_shape(q, k, window), scale, host::maybe_f32(bias));
  }  // the host views write back here, before the QK-norm's backward reads dq and dk
  qk_norm_backward(qk, dq, dk);
}

// out (B,T,H,hd) = the mix of softmax attention's output `soft` with v (B,T,Hkv,hd).
// centre: undefined (the running mean) or like v (E-SPA/U-SPA, AttnMix::centre_on_bias).
void mix_forward(const Dispatch& d, const Tensor& soft, const Tensor& v, const AttnMix& m,
                 const Tensor& centre, int64_t window, const Tensor& out) {
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t st = rt->stream();
    if (soft.numel() == 0) return;
    const cuda::AttnShape s = attention_shape(soft, v, window);
    const float *al = maybe_f32(m.alpha), *be = maybe_f32(m.beta), *ga = maybe_f32(m.gamma);
    // v1 and centre join the dtype dispatch (they are like v); v stands in for an absent one,
    // unread.
    const Tensor& v1 = m.lam != 0.0f ? m.v1 : v;
    const Tensor& cen = centre.defined() ? centre : v;
    on_acts(
        st,
        [&](auto sp, auto vp, auto v1p, auto cp, auto op) {
          cuda::MixSpa<std::remove_pointer_t<decltype(op)>> spa;
          spa.rowscale = maybe_f32(m.rowscale);
          spa.centre = centre.defined() ? cp : nullptr;
          cuda::attention_mix_forward(sp, vp, m.lam != 0.0f ? v1p : nullptr, al, be, ga, m.lam,
                                      op, s, spa, st);
        },
        in(soft), in(v), in(v1), in(cen), Act{out, false, true});
    return;
  }
#endif
  host::In sp(soft), vp(v);
  host::Out op(out);
  std::unique_ptr<host::In> v1p, cp;
  if (m.lam != 0.0f) v1p = std::make_unique<host::In>(m.v1);
  if (centre.defined()) cp = std::make_unique<host::In>(centre);
  cpu::MixSpa<float> spa;
  spa.rowscale = host::maybe_f32(m.rowscale);
  spa.centre = cp ? cp->p() : nullptr;
  cpu::attention_mix_forward<float>(sp, vp, v1p ? v1p->p() : nullptr, host::maybe_f32(m.alpha),
                                    host::maybe_f32(m.beta), host::maybe_f32(m.gamma), m.lam, op,
                                    attention_shape(soft, v, window), spa);
}

// Writes dsoft, adds into dv (+=) and fills g; with a centre (like v), writes dcentre (like v).
void mix_backward(const Dispatch& d, const Tensor& dout, const Tensor& soft, const Tensor& v,
                  const AttnMix& m, const Tensor& centre, int64_t window, const Tensor& dsoft,
                  const Tensor& dv, const Tensor& dcentre, const AttnMixGrads& g) {
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t st = rt->stream();
    if (soft.numel() == 0) return;
    const cuda::AttnShape s = attention_shape(soft, v, window);
    const float *al = maybe_f32(m.alpha), *be = maybe_f32(m.beta), *ga = maybe_f32(m.gamma);
    float *dal = maybe_f32_out(g.dalpha), *dbe = maybe_f32_out(g.dbeta),
          *dga = maybe_f32_out(g.dgamma);
    std::lock_guard<std::mutex> lock(rt->scratch_mutex());
    void* ws = rt->attention_workspace(cuda::attention_mix_workspace_bytes(s));
    const bool has_dv1 = g.dv1.defined();
    // Without a dv1 output, dsoft stands in for it in the dtype dispatch (unwritten); so do v
    // and dsoft for an absent centre and its gradient.
    const Tensor& dv1 = has_dv1 ? g.dv1 : dsoft;
    const bool has_centre = centre.defined();
    const Tensor& cen = has_centre ? centre : v;
    const Tensor& dcen = has_centre ? dcentre : dsoft;
    on_acts(
        st,
        [&](auto dop, auto sp, auto vp, auto cp, auto dsp, auto dvp, auto dv1p, auto dcp) {
          cuda::MixSpa<std::remove_pointer_t<decltype(dsp)>> spa;
          spa.rowscale = maybe_f32(m.rowscale);
          spa.centre = has_centre ? cp : nullptr;
          spa.dcentre = has_centre ? dcp : nullptr;
          cuda::attention_mix_backward(dop, sp, vp, al, be, ga, m.lam, dsp, dvp, dal, dbe, dga,
                                       has_dv1 ? dv1p : nullptr, s, spa, ws, st);
        },
        in(dout), in(soft), in(v), in(cen), out(dsoft), inout(dv), Act{dv1, false, has_dv1},
        Act{dcen, false, has_centre});
    return;
  }
#endif
  host::In dop(dout), sp(soft), vp(v);
  host::Out dsp(dsoft);
  host::InOut dvp(dv);
  std::unique_ptr<host::Out> dv1p, dcp;
  std::unique_ptr<host::In> cp;
  if (g.dv1.defined()) dv1p = std::make_unique<host::Out>(g.dv1);
  if (centre.defined()) {
    cp = std::make_unique<host::In>(centre);
    dcp = std::make_unique<host::Out>(dcentre);
  }
  cpu::MixSpa<float> spa;
  spa.rowscale = host::maybe_f32(m.rowscale);
  spa.centre = cp ? cp->p() : nullptr;
  spa.dcentre = dcp ? dcp->p() : nullptr;
  auto mut = [](const Tensor& t) { return t.defined() ? host::f32_of(t) : nullptr; };
  cpu::attention_mix_backward<float>(dop, sp, vp, nullptr, host::maybe_f32(m.alpha),
                                     host::maybe_f32(m.beta), host::maybe_f32(m.gamma), m.lam, dsp,
                                     dvp, mut(g.dalpha), mut(g.dbeta), mut(g.dgamma),
                                     dv1p ? dv1p->p() : nullptr, attention_shape(soft, v, window),
                                     spa);
}

// The centring term of AttnMix::centre_on_bias: softmax(bias) v under the window, computed as the
// attention of zero queries q0 (one per KV head) over k, v with the call's bias, and its lse (for
// the backward); all undefined without centre_on_bias.
struct ZeroQueryCentre {
  Tensor q0, lse0, centre;
};
ZeroQueryCentre centre_on_bias(const Dispatch& d, const Tensor& k, const Tensor& v,
                               int64_t window, float scale, const AttnExtras& ex) {
  ZeroQueryCentre z;
  if (!ex.mix.centre_on_bias) return z;
  z.q0 = Tensor::zeros(v.shape(), v.dtype(), v.device());
  z.lse0 = Tensor::zeros({v.dim(0), v.dim(2), v.dim(1)}, DType::kF32, v.device());
  z.centre = Tensor::zeros(v.shape(), v.dtype(), v.device());
  forward(d, z.q0, k, v, z.centre, z.lse0, window, scale, ex.bias);
  return z;
}

}  // namespace

cpu::AttnShape attention_shape(const Tensor& q, const Tensor& k, int64_t window) {
  cpu::AttnShape s;
  s.B = q.dim(0);
  s.T = q.dim(1);
  s.H = q.dim(2);
  s.hd = q.dim(3);
  s.Hkv = k.dim(2);
  s.window = window;
  return s;
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, int64_t window, float scale, const AttnExtras& ex) {
  check_attn(q, k, v, lse);
  VT_CHECK(out.numel() == q.numel());
  check_extras(q, v, ex);
  if (!ex.mix.active()) {
    forward(on("attention", {&q, &k, &v, &out, &lse}), q, k, v, out, lse, window, scale, ex.bias);
    return;
  }
  auto d = on("attention", {&q, &k, &v, &out, &lse, &ex.soft});
  forward(d, q, k, v, ex.soft, lse, window, scale, ex.bias);
  const ZeroQueryCentre z = centre_on_bias(d, k, v, window, scale, ex);
  mix_forward(d, ex.soft, v, ex.mix, z.centre, window, out);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, int64_t window, float scale, const AttnExtras& ex,
                        const AttnMixGrads& g, const AttnQkNormGrad& qk) {
  check_attn(q, k, v, lse);
  VT_CHECK(dq.numel() == q.numel() && dk.numel() == k.numel() && dv.numel() == v.numel());
  check_extras(q, v, ex);
  check_qk_norm_grad(qk, q, k);
  if (!ex.mix.active()) {
    backward(on("attention_backward", {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv}), q, k, v,
             out, lse, dout, dq, dk, dv, window, scale, ex.bias, qk);
    return;
  }
  auto d = on("attention_backward", {&q, &k, &v, &ex.soft, &lse, &dout, &dq, &dk, &dv});
  Tensor dsoft = Tensor::zeros(ex.soft.shape(), ex.soft.dtype(), ex.soft.device());
  Tensor dv_mix = Tensor::zeros(v.shape(), v.dtype(), v.device());
  // The centring term on the bias is recomputed (one more forward) rather than kept.
  const ZeroQueryCentre z = centre_on_bias(d, k, v, window, scale, ex);
  Tensor dcentre;
  if (z.centre.defined()) dcentre = Tensor::zeros(v.shape(), v.dtype(), v.device());
  mix_backward(d, dout, ex.soft, v, ex.mix, z.centre, window, dsoft, dv_mix, dcentre, g);
  backward(d, q, k, v, ex.soft, lse, dsoft, dq, dk, dv, window, scale, ex.bias, qk);
  if (z.centre.defined()) {
    // Through the zero-query attention: its dk is 0 (the scores do not depend on k when q = 0)
    // and its dq has no path to a parameter; only dv is kept.
    Tensor dq0 = Tensor::zeros(v.shape(), v.dtype(), v.device());
    Tensor dk0 = Tensor::zeros(k.shape(), k.dtype(), k.device());
    Tensor dv0 = Tensor::zeros(v.shape(), v.dtype(), v.device());
    backward(d, z.q0, k, v, z.centre, z.lse0, dcentre, dq0, dk0, dv0, window, scale, ex.bias, {});
    axpy_on(d.backend(), dv_mix, dv0, 1.0f);
  }
  axpy_on(d.backend(), dv, dv_mix, 1.0f);
}

}  // namespace vt::ops
