// Where an optimizer kernel finds its step's values (the floats of core/optim_math.h's
// adamw_coefs / muon_momentum_coefs / muon_apply_coefs, and the step's guard): fixed at the
// launch (FixedStep: the by-value calls, no gradient scale, always applied) or read from device
// memory when the kernel runs (StepInMemory: the optimizer's per-step scalars,
// optim/step_scalars.h, which a CUDA graph replays with each step's values). Both give a kernel
// the same floats, so the two launches compute the same bits. Include only from .cu files.
#pragma once
#include "core/optim_math.h"

namespace vt::cuda::detail {

template <class C>
struct FixedStep {
  C c;
  __device__ __forceinline__ C coefs() const { return c; }
  __device__ __forceinline__ float grad_scale() const { return 1.0f; }
  __device__ __forceinline__ bool apply() const { return true; }
};

template <class C>
struct StepInMemory {
  const float* guard;  // kGuardFloats floats (core/optim_math.h)
  const float* at;     // sizeof(C) / 4 floats
  __device__ __forceinline__ C coefs() const {
    C c;
    __builtin_memcpy(static_cast<void*>(&c), at, sizeof(C));
    return c;
  }
  __device__ __forceinline__ float grad_scale() const { return guard[kGuardGradScale]; }
  __device__ __forceinline__ bool apply() const { return guard[kGuardApply] != 0.0f; }
};

}  // namespace vt::cuda::detail
