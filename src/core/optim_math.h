// The optimizers' elementwise float maths on host memory: the AdamW update, Muon's momentum and
// its final apply, on n contiguous f32 elements. Owned by core because both the CPU backend (and
// the device emulator, which computes with it) and src/optim (the host optimizer path) run
// exactly these loops; src/optim/adamw.h and muon.h document the formulas and call these.
#pragma once
#include <cstdint>

namespace vt {

// One AdamW step's hyperparameters as the backends take them (ops::adamw_update).
struct AdamWStepArgs {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, weight_decay = 0.0, eps = 1e-10;
  int64_t t = 1;  // step count, >= 1
};

namespace cpu {

// AdamW at step count a.t >= 1 (VT_CHECK-fails otherwise), bias-corrected, decoupled decay:
//   p = p * (1 - lr * wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p = p - (lr / (1 - b1^t)) * m / (sqrt(v / (1 - b2^t)) + eps)
// (the scalar factors in double, rounded once to float; the loop in float).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStepArgs& a);
// buf = m*buf + (1-m)*g; u = (1-m)*g + m*buf (new buf). u may alias g.
void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum);
// p = p*(1 - lr*wd) - lr*scale*x; cautious (nanochat's cautious weight decay): the decay only
// where x*p >= 0 (x and the old p agree in sign, or one is 0), p - lr*scale*x elsewhere.
// With `copy`, the new p rounded to bf16 (nearest even) is written there too (the compute copy).
void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious = false, uint16_t* copy = nullptr);
// The same with x in bf16 (the distributed optimizer's bf16 broadcasts): each x read as its float.
void muon_apply(float* p, const uint16_t* x, int64_t n, double lr, double weight_decay,
                double scale, bool cautious = false, uint16_t* copy = nullptr);

}  // namespace cpu
}  // namespace vt
