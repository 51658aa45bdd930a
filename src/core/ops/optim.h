// The optimizer-update op family: AdamW and Muon's elementwise steps on contiguous f32 tensors
// of equal numel (the formulas: core/optim_math.h). Host kernels: core/optim_math.cc; CUDA
// kernels: kernels/adamw.cu and kernels/optim_update.cu (the coefficients formed in fp64 on the
// host and applied in fp32, exactly as the host loops do).
//
// Each update also comes in a form that reads its step's values from memory when it runs (a CUDA
// graph replays it with each step's values): StepValues names an f32 tensor on the op's device
// whose first kGuardFloats floats are the step's guard (core/optim_math.h: the factor gradients
// are read with, and whether to update at all) and the offset of the op's coefficients in it
// (the floats of adamw_coefs / muon_momentum_coefs / muon_apply_coefs). Both forms compute the
// same bits for the same floats; a guard that says "skip" leaves every output untouched.
// ops::step_guard (core/ops/reduce.h) forms a guard on the device.
#pragma once
#include "core/optim_math.h"
#include "core/tensor.h"

namespace vt::ops {

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamWStepArgs& a);
// buf = m*buf + (1-m)*g; u = (1-m)*g + m*buf (new buf). u may alias g.
void muon_momentum(const Tensor& g, const Tensor& buf, const Tensor& u, double momentum);
// p = p*(1 - lr*wd) - lr*scale*x; cautious: the decay only where x*p >= 0 (core/optim_math.h).
// p f32; x f32 or bf16 (read as its float: no f32 copy of a bf16 update needed). `copy`
// (optional, bf16, p's element count and device): receives the new p rounded to bf16, the bits
// ops::copy would make of it, in the same pass (the compute copy, ParamStore::compute_param).
void muon_apply(const Tensor& p, const Tensor& x, double lr, double weight_decay, double scale,
                bool cautious = false, const Tensor& copy = Tensor());

struct StepValues {
  Tensor scalars;  // f32, the update's device
  int64_t at = 0;  // the update's coefficients: scalars.flat(at, sizeof(coefs) / 4)
};
void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const StepValues& s);
void muon_momentum(const Tensor& g, const Tensor& buf, const Tensor& u, const StepValues& s);
void muon_apply(const Tensor& p, const Tensor& x, const StepValues& s, bool cautious = false,
                const Tensor& copy = Tensor());


}  // namespace vt::ops
