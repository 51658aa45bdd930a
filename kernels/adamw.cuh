// AdamW on the GPU: the same update as vt::optim::adamw_update (formula in src/optim/adamw.h) on
// n contiguous fp32 elements (fp32 master weights, fp32 states, fp32 grads). Device pointers.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace vt::cuda {

// Step count t >= 1 (already incremented). lr is this step's learning rate; the bias
// corrections and decay factor are formed in double on the host exactly as the CPU does.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, double lr,
                  double beta1, double beta2, double weight_decay, double eps, int64_t t,
                  cudaStream_t stream);
// The same with the step's values read from device memory when the kernel runs: `guard`, the
// step's kGuardFloats guard floats (each gradient read as guard[kGuardGradScale] * g; nothing
// written when guard[kGuardApply] is 0), and `coefs`, the 8 floats of vt::AdamWCoefs
// (core/optim_math.h).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const float* guard,
                  const float* coefs, cudaStream_t stream);

}  // namespace vt::cuda
