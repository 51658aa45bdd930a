// AdamW kernel (see adamw.cuh): elementwise, grid-stride loop, same float operations as the CPU.
#include "kernels/adamw.cuh"

#include <cmath>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float decay,
                             float step_size, float inv_bc2, float b1, float omb1, float b2,
                             float omb2, float eps) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi * inv_bc2) + eps);
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, double lr,
                  double beta1, double beta2, double weight_decay, double eps, int64_t t,
                  cudaStream_t stream) {
  if (t < 1) cuda_fail(cudaErrorInvalidValue, "adamw_update: step count t must be >= 1",
                       __FILE__, __LINE__);
  if (n == 0) return;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  VT_LAUNCH(adamw_kernel, grid_for(n, kThreads), kThreads, 0, stream, p, g, m, v, n,
            static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(lr / bc1),
            static_cast<float>(1.0 / bc2), static_cast<float>(beta1),
            static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
            static_cast<float>(1.0 - beta2), static_cast<float>(eps));
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
