// Muon's elementwise pieces on the GPU, the same float operations as vt::optim::muon_momentum and
// vt::optim::muon_apply (src/optim/muon.cc); the Newton-Schulz orthogonalization between them is
// GEMMs. n contiguous fp32 elements, device pointers, fp64 hyperparameters converted to fp32 on
// the host exactly as the CPU does. (AdamW is kernels/adamw.cuh.)
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// buf = m*buf + (1-m)*g; u = (1-m)*g + m*buf (the new buf). u may alias g.
void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum,
                   cudaStream_t stream);
// p = p*(1 - lr*wd) - lr*scale*x; cautious: the decay only where x*p >= 0. With `copy`, the new
// p rounded to bf16 (nearest even) is written there too: the compute copy, in the same pass.
void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious, cudaStream_t stream, __nv_bfloat16* copy = nullptr);
// The same with x in bf16 (each read as its float).
void muon_apply(float* p, const __nv_bfloat16* x, int64_t n, double lr, double weight_decay,
                double scale, bool cautious, cudaStream_t stream, __nv_bfloat16* copy = nullptr);

// The three with the step's values read from device memory when the kernel runs: `guard`, the
// step's kGuardFloats guard floats (core/optim_math.h: the momentum reads each gradient as
// guard[kGuardGradScale] * g; nothing is written when guard[kGuardApply] is 0), and `coefs`, the
// floats of vt::MuonMomentumCoefs / vt::MuonApplyCoefs.
void muon_momentum(const float* g, float* buf, float* u, int64_t n, const float* guard,
                   const float* coefs, cudaStream_t stream);
void muon_apply(float* p, const float* x, int64_t n, const float* guard, const float* coefs,
                bool cautious, cudaStream_t stream, __nv_bfloat16* copy = nullptr);
void muon_apply(float* p, const __nv_bfloat16* x, int64_t n, const float* guard,
                const float* coefs, bool cautious, cudaStream_t stream,
                __nv_bfloat16* copy = nullptr);

}  // namespace vt::cuda
