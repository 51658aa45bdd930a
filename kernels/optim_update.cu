// Muon elementwise kernels (see optim_update.cuh): grid-stride loops, fp32 math with the
// coefficients the CPU forms (float(momentum), float(1 - momentum), float(1 - lr*wd),
// float(lr*scale)).
#include "kernels/optim_update.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

// g and u are not __restrict__: u may alias g (each element is read before it is written, by
// the same thread).
__global__ void muon_momentum_kernel(const float* g, float* buf, float* u, int64_t n, float mo,
                                     float om) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float bi = mo * buf[i] + om * gi;
    buf[i] = bi;
    u[i] = om * gi + mo * bi;
  }
}

// copy (may be null): the bf16 compute copy of p, written with the new p rounded to nearest
// even (the cast refresh_compute_copy would make, without reading p again).
template <class X>
__global__ void muon_apply_kernel(float* p, const X* x, int64_t n, float decay, float step,
                                  bool cautious, __nv_bfloat16* copy) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float pi = p[i], xi = detail::to_f32(x[i]);
    const float np = (!cautious || xi * pi >= 0.0f ? pi * decay : pi) - step * xi;
    p[i] = np;
    if (copy != nullptr) copy[i] = detail::from_f32<__nv_bfloat16>(np);
  }
}

}  // namespace

void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum,
                   cudaStream_t stream) {
  if (n == 0) return;
  const float mo = static_cast<float>(momentum);
  const float om = static_cast<float>(1.0 - momentum);
  VT_LAUNCH(muon_momentum_kernel, grid_for(n, kThreads), kThreads, 0, stream, g, buf, u, n, mo, om);
  VT_CUDA_CHECK_LAUNCH();
}

template <class X>
void launch_muon_apply(float* p, const X* x, int64_t n, double lr, double weight_decay,
                       double scale, bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  if (n == 0) return;
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const float step = static_cast<float>(lr * scale);
  VT_LAUNCH(muon_apply_kernel<X>, grid_for(n, kThreads), kThreads, 0, stream, p, x, n, decay,
            step, cautious, copy);
  VT_CUDA_CHECK_LAUNCH();
}

void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  launch_muon_apply(p, x, n, lr, weight_decay, scale, cautious, stream, copy);
}

void muon_apply(float* p, const __nv_bfloat16* x, int64_t n, double lr, double weight_decay,
                double scale, bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  launch_muon_apply(p, x, n, lr, weight_decay, scale, cautious, stream, copy);
}

}  // namespace vt::cuda
