// The optimizer-update op family (core/ops/optim.h): checks, the host loops, the CUDA launches.
#include "core/ops/optim.h"

#include <cstring>
#include <utility>

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

// The guard and the coefficients of `s` for an op on `like`'s device: pointers into its
// memory (device memory on a GPU; the host backends read them where they lie).
template <class C>
std::pair<const float*, const float*> step_values(const char* op, const StepValues& s,
                                                  const Tensor& like) {
  need_f32(op, s.scalars, "the step's scalars");
  constexpr int64_t kFloats = sizeof(C) / sizeof(float);
  VT_CHECK_MSG(s.scalars.device() == like.device(),
               op << ": the step's scalars are on another device than its tensors");
  VT_CHECK_MSG(s.at >= kGuardFloats && s.at + kFloats <= s.scalars.numel(),
               op << ": coefficients at " << s.at << " (+" << kFloats << ") outside the "
                  << s.scalars.numel() << " step scalars (the guard holds the first "
                  << kGuardFloats << ")");
  const float* base = f32(s.scalars);
  return {base, base + s.at};
}
template <class C>
C coefs_at(const float* at) {
  C c;
  std::memcpy(&c, at, sizeof c);
  return c;
}
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

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const StepValues& s) {
  for (const Tensor* t : {&p, &g, &m, &v}) {
    need_f32("adamw_update", *t, "every argument");
    VT_CHECK(t->numel() == p.numel());
  }
  const auto [guard, at] = step_values<AdamWCoefs>("adamw_update", s, p);
  if (p.numel() == 0) return;
  auto d = on("adamw_update", {&p, &g, &m, &v, &s.scalars});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    cuda::adamw_update(f32(p), f32(g), f32(m), f32(v), p.numel(), guard, at, rt->stream());
    return;
  }
#endif
  if (guard[kGuardApply] == 0.0f) return;
  cpu::adamw_update(f32(p), f32(g), f32(m), f32(v), p.numel(), coefs_at<AdamWCoefs>(at),
                    guard[kGuardGradScale]);
}

void muon_momentum(const Tensor& g, const Tensor& buf, const Tensor& u, const StepValues& s) {
  for (const Tensor* t : {&g, &buf, &u}) {
    need_f32("muon_momentum", *t, "every argument");
    VT_CHECK(t->numel() == g.numel());
  }
  const auto [guard, at] = step_values<MuonMomentumCoefs>("muon_momentum", s, g);
  if (g.numel() == 0) return;
  auto d = on("muon_momentum", {&g, &buf, &u, &s.scalars});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    cuda::muon_momentum(f32(g), f32(buf), f32(u), g.numel(), guard, at, rt->stream());
    return;
  }
#endif
  if (guard[kGuardApply] == 0.0f) return;
  cpu::muon_momentum(f32(g), f32(buf), f32(u), g.numel(), coefs_at<MuonMomentumCoefs>(at),
                     guard[kGuardGradScale]);
}

void muon_apply(const Tensor& p, const Tensor& x, const StepValues& s, bool cautious,
                const Tensor& copy) {
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
  const auto [guard, at] = step_values<MuonApplyCoefs>("muon_apply", s, p);
  if (p.numel() == 0) return;
  auto d = copies ? on("muon_apply", {&p, &x, &copy, &s.scalars})
                  : on("muon_apply", {&p, &x, &s.scalars});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    __nv_bfloat16* c = copies ? cuda_acts::bf16p(copy) : nullptr;
    if (bf16)
      cuda::muon_apply(f32(p), cuda_acts::bf16p(x), p.numel(), guard, at, cautious, rt->stream(),
                       c);
    else
      cuda::muon_apply(f32(p), f32(x), p.numel(), guard, at, cautious, rt->stream(), c);
    return;
  }
#endif
  if (guard[kGuardApply] == 0.0f) return;
  uint16_t* c = copies ? static_cast<uint16_t*>(copy.raw()) : nullptr;
  const MuonApplyCoefs co = coefs_at<MuonApplyCoefs>(at);
  if (bf16)
    cpu::muon_apply(f32(p), static_cast<const uint16_t*>(x.raw()), p.numel(), co, cautious, c);
  else
    cpu::muon_apply(f32(p), f32(x), p.numel(), co, cautious, c);
}

}  // namespace vt::ops
