// The optimizer-update op family (core/ops/optim.h): checks, the host loops, the CUDA launches.
#include "core/ops/optim.h"

#include "core/check.h"
#include "core/ops/dispatch.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/adamw.cuh"
#include "kernels/optim_update.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {
float* f32(const Tensor& t) { return static_cast<float*>(t.raw()); }
}  // namespace

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamWStepArgs& a) {
  for (const Tensor* t : {&p, &g, &m, &v}) {
    need_f32("adamw_update", *t, "every argument");
    VT_CHECK(t->numel() == p.numel());
  }
  if (p.numel() == 0) return;
  auto d = on("adamw_update", {&p, &g, &m, &v});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    VT_CHECK_MSG(a.t >= 1, "AdamW step count must be >= 1, got " << a.t);
    cuda::adamw_update(f32(p), f32(g), f32(m), f32(v), p.numel(), a.lr, a.beta1, a.beta2,
                       a.weight_decay, a.eps, a.t, rt->stream());
    return;
  }
#endif
  cpu::adamw_update(f32(p), f32(g), f32(m), f32(v), p.numel(), a);
}

void muon_momentum(const Tensor& g, const Tensor& buf, const Tensor& u, double momentum) {
  for (const Tensor* t : {&g, &buf, &u}) {
    need_f32("muon_momentum", *t, "every argument");
    VT_CHECK(t->numel() == g.numel());
  }
  if (g.numel() == 0) return;
  auto d = on("muon_momentum", {&g, &buf, &u});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    cuda::muon_momentum(f32(g), f32(buf), f32(u), g.numel(), momentum, rt->stream());
    return;
  }
#endif
  cpu::muon_momentum(f32(g), f32(buf), f32(u), g.numel(), momentum);
}

void muon_apply(const Tensor& p, const Tensor& x, double lr, double weight_decay, double scale,
                bool cautious, const Tensor& copy) {
  need_f32("muon_apply", p, "p");
  const bool bf16 = x.dtype() == DType::kBF16;
  if (!bf16) need_f32("muon_apply", x, "x (f32 or bf16)");
  VT_CHECK_MSG(p.numel() == x.numel(), "muon_apply: p has " << p.numel() << " elements, x "
                                                             << x.numel());
  const bool copies = copy.defined();
  if (copies)
    VT_CHECK_MSG(copy.dtype() == DType::kBF16 && copy.numel() == p.numel(),
                 "muon_apply: the compute copy must be bf16 with p's " << p.numel()
                                                                      << " elements");
  if (p.numel() == 0) return;
  auto d = copies ? on("muon_apply", {&p, &x, &copy}) : on("muon_apply", {&p, &x});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    __nv_bfloat16* c = copies ? cuda_acts::bf16p(copy) : nullptr;
    if (bf16)
      cuda::muon_apply(f32(p), cuda_acts::bf16p(x), p.numel(), lr, weight_decay, scale, cautious,
                       rt->stream(), c);
    else
      cuda::muon_apply(f32(p), f32(x), p.numel(), lr, weight_decay, scale, cautious, rt->stream(),
                       c);
    return;
  }
#endif
  uint16_t* c = copies ? static_cast<uint16_t*>(copy.raw()) : nullptr;
  if (bf16)
    cpu::muon_apply(f32(p), static_cast<const uint16_t*>(x.raw()), p.numel(), lr, weight_decay,
                    scale, cautious, c);
  else
    cpu::muon_apply(f32(p), f32(x), p.numel(), lr, weight_decay, scale, cautious, c);
}

}  // namespace vt::ops
