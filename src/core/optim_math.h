// The optimizers' elementwise float maths on host memory: the AdamW update, Muon's momentum and
// its final apply, on n contiguous f32 elements. Owned by core because both the CPU backend (and
// the device emulator, which computes with it) and src/optim (the host optimizer path) run
// exactly these loops; src/optim/adamw.h and muon.h document the formulas and call these.
#pragma once
#include <cmath>
#include <cstdint>

namespace vt {

// One AdamW step's hyperparameters as the backends take them (ops::adamw_update).
struct AdamWStepArgs {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, weight_decay = 0.0, eps = 1e-10;
  int64_t t = 1;  // step count, >= 1
};

// The floats each update's loop computes with, formed from the doubles in one place: the CPU
// loops, the CUDA launches and the optimizer's per-step scalars (optim/step_scalars.h) all take
// them from these functions, so a kernel that reads them from device memory computes the bits of
// one that got them as arguments. Plain structs of floats (a kernel reads one from memory).
struct AdamWCoefs {  // p = p*decay - step_size*m / (sqrt(v*inv_bc2) + eps)
  float decay, step_size, inv_bc2, b1, omb1, b2, omb2, eps;
};
struct MuonMomentumCoefs {  // buf = mo*buf + om*g; u = om*g + mo*buf
  float mo, om;
};
struct MuonApplyCoefs {  // p = p*decay - step*x
  float decay, step;
};
// Bias corrections 1 - beta^t in double; the factors rounded once to float. a.t >= 1 (checked by
// the callers that take AdamWStepArgs).
inline AdamWCoefs adamw_coefs(const AdamWStepArgs& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.t));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.t));
  return {static_cast<float>(1.0 - a.lr * a.weight_decay), static_cast<float>(a.lr / bc1),
          static_cast<float>(1.0 / bc2),                   static_cast<float>(a.beta1),
          static_cast<float>(1.0 - a.beta1),               static_cast<float>(a.beta2),
          static_cast<float>(1.0 - a.beta2),               static_cast<float>(a.eps)};
}
inline MuonMomentumCoefs muon_momentum_coefs(double momentum) {
  return {static_cast<float>(momentum), static_cast<float>(1.0 - momentum)};
}
inline MuonApplyCoefs muon_apply_coefs(double lr, double weight_decay, double scale) {
  return {static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(lr * scale)};
}

// The guard of an optimizer step: kGuardFloats floats at the start of the step's scalars that
// every update reads when it runs. [kGuardGradScale]: the factor each gradient is multiplied by
// as the update reads it (the clip; 1 when not clipping: x * 1 is x, so the bits of an update
// without one); [kGuardApply]: 1 to update, 0 to leave parameters and states as they are (a
// non-finite step found on the device); [kGuardSumSquares, +2): the fp64 sum of squares of the
// gradients the guard was formed from (its 8 bytes; written by ops::step_guard, read back for
// the log). The host writes the first two in an eager step (the clip it formed from the norm it
// read); ops::step_guard writes all four on the device.
inline constexpr int kGuardGradScale = 0, kGuardApply = 1, kGuardSumSquares = 2, kGuardFloats = 4;

namespace cpu {

// AdamW at step count a.t >= 1 (VT_CHECK-fails otherwise), bias-corrected, decoupled decay:
//   p = p * (1 - lr * wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p = p - (lr / (1 - b1^t)) * m / (sqrt(v / (1 - b2^t)) + eps)
// (the scalar factors in double, rounded once to float; the loop in float).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStepArgs& a);
// The same loop on the floats of adamw_coefs, each gradient read as grad_scale * g[i].
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWCoefs& c,
                  float grad_scale);
// buf = m*buf + (1-m)*g; u = (1-m)*g + m*buf (new buf). u may alias g.
void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum);
// The same on muon_momentum_coefs' floats, each gradient read as grad_scale * g[i].
void muon_momentum(const float* g, float* buf, float* u, int64_t n, const MuonMomentumCoefs& c,
                   float grad_scale);
// p = p*(1 - lr*wd) - lr*scale*x; cautious (nanochat's cautious weight decay): the decay only
// where x*p >= 0 (x and the old p agree in sign, or one is 0), p - lr*scale*x elsewhere.
// With `copy`, the new p rounded to bf16 (nearest even) is written there too (the compute copy).
void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious = false, uint16_t* copy = nullptr);
// The same with x in bf16 (the distributed optimizer's bf16 broadcasts): each x read as its float.
void muon_apply(float* p, const uint16_t* x, int64_t n, double lr, double weight_decay,
                double scale, bool cautious = false, uint16_t* copy = nullptr);
// Both on muon_apply_coefs' floats.
void muon_apply(float* p, const float* x, int64_t n, const MuonApplyCoefs& c, bool cautious,
                uint16_t* copy);
void muon_apply(float* p, const uint16_t* x, int64_t n, const MuonApplyCoefs& c, bool cautious,
                uint16_t* copy);

}  // namespace cpu
}  // namespace vt
