// The RMSNorm op family and its fusions with the residual adds (core/ops/rmsnorm.h): checks, the
// host path, the CUDA launches.
#include "core/ops/rmsnorm.h"

#include <type_traits>

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
                      float scale, bool accumulate, const Tensor& dy2) {
  const int64_t C = x.dim(-1), R = rows_of(x);
  VT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && rstd.numel() == R);
  need_f32("rmsnorm_backward", rstd, "rstd");
  const bool two = dy2.defined();
  if (two) {
    // The fused sum rounds dy + dy2 to the one dtype all of them share (what axpy stores); a
    // mixed call would sum in a widened fp32 view and round elsewhere.
    VT_CHECK_MSG(dy2.numel() == dy.numel(), "rmsnorm_backward: dy2 has "
                                                << dy2.numel() << " elements, dy " << dy.numel());
    VT_CHECK_MSG(dy2.dtype() == dy.dtype() && x.dtype() == dy.dtype() && dx.dtype() == dy.dtype(),
                 "rmsnorm_backward: the fused gradient sum (dy2) needs one dtype for x, dy, dy2 "
                 "and dx; got x " << dtype_name(x.dtype()) << ", dy " << dtype_name(dy.dtype())
                                  << ", dy2 " << dtype_name(dy2.dtype()) << ", dx "
                                  << dtype_name(dx.dtype()));
  }
  auto d = two ? on("rmsnorm_backward", {&x, &rstd, &dy, &dx, &dy2})
               : on("rmsnorm_backward", {&x, &rstd, &dy, &dx});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* r = f32_of(rstd);
    if (two) {
      on_acts(
          s,
          [&](auto xp, auto dyp, auto dy2p, auto dxp) {
            cuda::rmsnorm_backward(xp, r, dyp, dxp, R, C, scale, accumulate, s, dy2p);
          },
          in(x), in(dy), in(dy2), acc(dx, accumulate));
      return;
    }
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
  if (two) {
    host::In dy2p(dy2);
    cpu::rmsnorm_backward<float>(xp, host::f32_of(rstd), dyp, dxp, R, C, scale, accumulate, dy2p,
                                 dy.dtype() == DType::kBF16);
    return;
  }
  cpu::rmsnorm_backward<float>(xp, host::f32_of(rstd), dyp, dxp, R, C, scale, accumulate);
}

void add_rmsnorm(const Tensor& x, const Tensor& delta, const Tensor& keep, const Tensor& y,
                 const Tensor& rstd, float scale, double eps) {
  const char* op = "add_rmsnorm";
  need_float(op, x);
  const bool keeps = keep.defined();
  // A fused add only where it equals axpy then rmsnorm: one element count, one dtype (the sum is
  // rounded once, to it), and outputs apart from the stream it updates in place.
  auto same = [&](const Tensor& t, const char* what) {
    VT_CHECK_MSG(t.defined() && t.numel() == x.numel(),
                 op << ": " << what << " has " << t.numel() << " elements, the stream x "
                    << x.numel());
    VT_CHECK_MSG(t.dtype() == x.dtype(), op << ": " << what << " is " << dtype_name(t.dtype())
                                            << ", the stream x " << dtype_name(x.dtype())
                                            << " (the fused add rounds once, to x's dtype; "
                                               "mixed dtypes take axpy and rmsnorm)");
    VT_CHECK_MSG(x.numel() == 0 || t.raw() != x.raw(),
                 op << ": " << what << " aliases the stream x, which the op updates in place");
  };
  same(delta, "delta");
  same(y, "y");
  if (keeps) {
    same(keep, "keep");
    VT_CHECK_MSG(x.numel() == 0 || keep.raw() != y.raw(), op << ": keep aliases y");
  }
  VT_CHECK_MSG(x.numel() == 0 || y.raw() != delta.raw(), op << ": y aliases delta");
  const int64_t C = x.dim(-1), R = rows_of(x);
  VT_CHECK_MSG(rstd.numel() == R,
               op << ": rstd has " << rstd.numel() << " entries for " << R << " rows");
  need_f32(op, rstd, "rstd");
  auto d = keeps ? on("add_rmsnorm", {&x, &delta, &keep, &y, &rstd})
                 : on("add_rmsnorm", {&x, &delta, &y, &rstd});
  if (x.numel() == 0) return;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    float* r = f32_of(rstd);
    const float e = static_cast<float>(eps);
    // One dtype (checked above): on_acts runs its f32 or its bf16 kernel, never the mixed path.
    if (keeps) {
      on_acts(
          s,
          [&](auto xp, auto dp, auto kp, auto yp) {
            cuda::add_rmsnorm_forward(xp, dp, kp, yp, r, R, C, scale, e, s);
          },
          inout(x), in(delta), out(keep), out(y));
      return;
    }
    on_acts(
        s,
        [&](auto xp, auto dp, auto yp) {
          using E = std::remove_pointer_t<decltype(xp)>;
          cuda::add_rmsnorm_forward(xp, dp, static_cast<E*>(nullptr), yp, r, R, C, scale, e, s);
        },
        inout(x), in(delta), out(y));
    return;
  }
#endif
  const bool round = x.dtype() == DType::kBF16;
  host::InOut xp(x);
  host::In dp(delta);
  host::Out yp(y);
  if (keeps) {
    host::Out kp(keep);
    cpu::add_rmsnorm_forward<float>(xp, dp, kp, yp, host::f32_of(rstd), R, C, scale, eps, round);
    return;
  }
  cpu::add_rmsnorm_forward<float>(xp, dp, nullptr, yp, host::f32_of(rstd), R, C, scale, eps,
                                  round);
}

}  // namespace vt::ops
