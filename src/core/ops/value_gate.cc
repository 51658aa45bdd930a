// The value-embed gate op family (core/ops/value_gate.h): checks, the host loops, the CUDA
// launches (ctx, emb, v: G rows of hd; the gate kernels see them as (G, 1 head, hd)).
#include "core/ops/value_gate.h"

#include <cmath>

#include "core/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/value_mix.cuh"
#endif

namespace vt::ops {

using namespace detail;

void gate_sigmoid(const Tensor& z, float gate_scale) {
  need_f32("gate_sigmoid", z, "z");
  auto d = on("gate_sigmoid", {&z});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    cuda::value_gate_sigmoid(cuda_acts::f32_of(z), z.numel(), gate_scale, rt->stream());
    return;
  }
#endif
  float* p = host::f32_of(z);
  for (int64_t i = 0; i < z.numel(); ++i) p[i] = gate_scale / (1.0f + std::exp(-p[i]));
}

void gated_mix(const Tensor& ctx, const Tensor& emb, const Tensor& gate, const Tensor& v) {
  need_f32("gated_mix", gate, "the gate");
  VT_CHECK(ctx.numel() == v.numel() && emb.numel() == v.numel() && v.numel() % gate.numel() == 0);
  auto d = on("gated_mix", {&ctx, &emb, &gate, &v});
  const int64_t G = gate.numel();
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* g = f32_of(gate);
    if (G == 0) return;
    const int64_t hd = v.numel() / G;
    on_acts(s, [&](auto cp, auto ep, auto vp) { cuda::value_gated_mix(cp, ep, g, vp, G, 1, hd, s); },
            in(ctx), in(emb), out(v));
    return;
  }
#endif
  host::In cp(ctx), ep(emb);
  host::Out vp(v);
  const float* g = host::f32_of(gate);
  const int64_t hd = v.numel() / G;
  for (int64_t r = 0; r < G; ++r)
    for (int64_t k = 0; k < hd; ++k)
      vp.p()[r * hd + k] = cp.p()[r * hd + k] + g[r] * ep.p()[r * hd + k];
}

void gated_mix_backward(const Tensor& dv, const Tensor& emb, const Tensor& gate,
                        const Tensor& demb, const Tensor& dgate) {
  need_f32("gated_mix_backward", gate, "the gate");
  need_f32("gated_mix_backward", dgate, "the gate gradient");
  VT_CHECK(emb.numel() == dv.numel() && demb.numel() == dv.numel() &&
           dgate.numel() == gate.numel() && dv.numel() % gate.numel() == 0);
  auto d = on("gated_mix_backward", {&dv, &emb, &gate, &demb, &dgate});
  const int64_t G = gate.numel();
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* g = f32_of(gate);
    float* dg = f32_of(dgate);
    if (G == 0) return;
    const int64_t hd = dv.numel() / G;
    on_acts(
        s,
        [&](auto dvp, auto ep, auto dep) {
          cuda::value_gated_mix_backward(dvp, ep, g, dep, dg, G, 1, hd, s);
        },
        in(dv), in(emb), out(demb));
    return;
  }
#endif
  host::In dvp(dv), ep(emb);
  host::Out dep(demb);
  const float* g = host::f32_of(gate);
  float* dg = host::f32_of(dgate);
  const int64_t hd = dv.numel() / G;
  for (int64_t r = 0; r < G; ++r) {
    double s = 0.0;
    for (int64_t k = 0; k < hd; ++k) {
      const int64_t o = r * hd + k;
      s += static_cast<double>(dvp.p()[o]) * ep.p()[o];
      dep.p()[o] = g[r] * dvp.p()[o];
    }
    dg[r] = static_cast<float>(s);
  }
}

void gate_sigmoid_backward(const Tensor& gate, const Tensor& dgate, float gate_scale,
                           const Tensor& dz) {
  need_f32("gate_sigmoid_backward", gate, "the gate");
  need_f32("gate_sigmoid_backward", dgate, "the gate gradient");
  VT_CHECK(dgate.numel() == gate.numel() && dz.numel() == gate.numel());
  auto d = on("gate_sigmoid_backward", {&gate, &dgate, &dz});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    cuda_acts::need_float(dz);
    if (dz.dtype() == DType::kF32)
      cuda::value_gate_sigmoid_backward(f32_of(gate), f32_of(dgate), gate_scale, f32p(dz),
                                        gate.numel(), s);
    else
      cuda::value_gate_sigmoid_backward(f32_of(gate), f32_of(dgate), gate_scale, bf16p(dz),
                                        gate.numel(), s);
    return;
  }
#endif
  const float* g = host::f32_of(gate);
  const float* dg = host::f32_of(dgate);
  host::Out dzp(dz);
  for (int64_t i = 0; i < gate.numel(); ++i)
    dzp.p()[i] = static_cast<float>(static_cast<double>(dg[i]) * g[i] * (1.0 - g[i] / gate_scale));
}

}  // namespace vt::ops
