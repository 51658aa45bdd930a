// The activation op family (core/ops/activation.h): checks, the host path, the CUDA launches.
#include "core/ops/activation.h"

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/activation.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

// relu^2 (kSquared) and relu share everything but the kernel they call: one forward and one
// backward, on the device the tensors are on.
template <bool kSquared>
void act_forward(const char* name, const Tensor& x, const Tensor& y) {
  VT_CHECK(y.numel() == x.numel());
  auto d = on(name, {&x, &y});
  const int64_t n = x.numel();
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    on_acts(
        s,
        [&](auto xp, auto yp) {
          if constexpr (kSquared) cuda::relu2_forward(xp, yp, n, s);
          else cuda::relu_forward(xp, yp, n, s);
        },
        in(x), out(y));
    return;
  }
#endif
  host::In xp(x);
  host::Out yp(y);
  if constexpr (kSquared) cpu::relu2_forward<float>(xp, yp, n);
  else cpu::relu_forward<float>(xp, yp, n);
}

template <bool kSquared>
void act_backward(const char* name, const Tensor& x, const Tensor& dy, const Tensor& dx,
                  bool accumulate) {
  VT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel());
  auto d = on(name, {&x, &dy, &dx});
  const int64_t n = x.numel();
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    on_acts(
        s,
        [&](auto xp, auto dyp, auto dxp) {
          if constexpr (kSquared) cuda::relu2_backward(xp, dyp, dxp, n, accumulate, s);
          else cuda::relu_backward(xp, dyp, dxp, n, accumulate, s);
        },
        in(x), in(dy), acc(dx, accumulate));
    return;
  }
#endif
  host::In xp(x), dyp(dy);
  host::F32 dxp(dx, accumulate, true);
  if constexpr (kSquared) cpu::relu2_backward<float>(xp, dyp, dxp, n, accumulate);
  else cpu::relu_backward<float>(xp, dyp, dxp, n, accumulate);
}

}  // namespace

void relu2(const Tensor& x, const Tensor& y) { act_forward<true>("relu2", x, y); }
void relu2_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) {
  act_backward<true>("relu2_backward", x, dy, dx, accumulate);
}
void relu(const Tensor& x, const Tensor& y) { act_forward<false>("relu", x, y); }
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) {
  act_backward<false>("relu_backward", x, dy, dx, accumulate);
}

}  // namespace vt::ops
