// The RMSNorm op family (core/ops/rmsnorm.h): checks, the host path, the CUDA launches.
#include "core/ops/rmsnorm.h"

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"
#include "core/ops/rows.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/rmsnorm.cuh"
#endif

namespace vt::ops {

using namespace detail;

void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, float scale, double eps) {
  const int64_t C = x.dim(-1), R = rows_of(x);
  VT_CHECK(y.numel() == x.numel() && rstd.numel() == R);
  need_float("rmsnorm", x);
  need_f32("rmsnorm", rstd, "rstd");
  auto d = on("rmsnorm", {&x, &y, &rstd});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    float* r = f32_of(rstd);
    const float e = static_cast<float>(eps);
    on_acts(s, [&](auto xp, auto yp) { cuda::rmsnorm_forward(xp, yp, r, R, C, scale, e, s); },
            in(x), out(y));
    return;
  }
#endif
  host::In xp(x);
  host::Out yp(y);
  cpu::rmsnorm_forward<float>(xp, yp, host::f32_of(rstd), R, C, scale, eps);
}

void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      float scale, bool accumulate) {
  const int64_t C = x.dim(-1), R = rows_of(x);
  VT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && rstd.numel() == R);
  need_f32("rmsnorm_backward", rstd, "rstd");
  auto d = on("rmsnorm_backward", {&x, &rstd, &dy, &dx});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* r = f32_of(rstd);
    on_acts(
        s,
        [&](auto xp, auto dyp, auto dxp) {
          cuda::rmsnorm_backward(xp, r, dyp, dxp, R, C, scale, accumulate, s);
        },
        in(x), in(dy), acc(dx, accumulate));
    return;
  }
#endif
  host::In xp(x), dyp(dy);
  host::F32 dxp(dx, accumulate, true);
  cpu::rmsnorm_backward<float>(xp, host::f32_of(rstd), dyp, dxp, R, C, scale, accumulate);
}

}  // namespace vt::ops
