// The optimizers' elementwise float maths (core/optim_math.h).
#include "core/optim_math.h"

#include <cmath>

#include "core/bf16.h"
#include "core/check.h"

namespace vt::cpu {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const AdamWStepArgs& a) {
  VT_CHECK_MSG(a.t >= 1, "AdamW step count must be >= 1, got " << a.t);
  adamw_update(p, g, m, v, n, adamw_coefs(a), 1.0f);
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWCoefs& c,
                  float grad_scale) {
  const float decay = c.decay, step_size = c.step_size, inv_bc2 = c.inv_bc2;
  const float b1 = c.b1, omb1 = c.omb1, b2 = c.b2, omb2 = c.omb2, eps = c.eps;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = grad_scale * g[i];  // x * 1 is x: the bits of the loop without a scale
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi * inv_bc2) + eps);
  }
}

void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum) {
  muon_momentum(g, buf, u, n, muon_momentum_coefs(momentum), 1.0f);
}

void muon_momentum(const float* g, float* buf, float* u, int64_t n, const MuonMomentumCoefs& c,
                   float grad_scale) {
  const float mo = c.mo, om = c.om;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = grad_scale * g[i];
    const float bi = mo * buf[i] + om * gi;
    buf[i] = bi;
    u[i] = om * gi + mo * bi;
  }
}

namespace {
inline float as_float(float x) { return x; }
inline float as_float(uint16_t x) { return bf16_to_f32(x); }

template <class X>
void muon_apply_impl(float* p, const X* x, int64_t n, const MuonApplyCoefs& c, bool cautious,
                     uint16_t* copy) {
  const float decay = c.decay, step = c.step;
  if (cautious) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float pi = p[i], xi = as_float(x[i]);
      p[i] = (xi * pi >= 0.0f ? pi * decay : pi) - step * xi;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] * decay - step * as_float(x[i]);
  }
  if (copy != nullptr) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) copy[i] = f32_to_bf16(p[i]);
  }
}
}  // namespace

void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious, uint16_t* copy) {
  muon_apply_impl(p, x, n, muon_apply_coefs(lr, weight_decay, scale), cautious, copy);
}

void muon_apply(float* p, const uint16_t* x, int64_t n, double lr, double weight_decay,
                double scale, bool cautious, uint16_t* copy) {
  muon_apply_impl(p, x, n, muon_apply_coefs(lr, weight_decay, scale), cautious, copy);
}

void muon_apply(float* p, const float* x, int64_t n, const MuonApplyCoefs& c, bool cautious,
                uint16_t* copy) {
  muon_apply_impl(p, x, n, c, cautious, copy);
}

void muon_apply(float* p, const uint16_t* x, int64_t n, const MuonApplyCoefs& c, bool cautious,
                uint16_t* copy) {
  muon_apply_impl(p, x, n, c, cautious, copy);
}

}  // namespace vt::cpu
