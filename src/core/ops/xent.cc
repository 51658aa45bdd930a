// The cross-entropy op family (core/ops/xent.h): checks, the host path, the CUDA launches.
#include "core/ops/xent.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"
#include "core/ops/rows.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/xent.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

void check_xent(const XentArgs& x) {
  VT_CHECK_MSG(x.targets.dtype() == DType::kI32, "cross-entropy targets must be i32");
  VT_CHECK(rows_of(x.logits) == x.targets.numel() && x.n_valid >= 0 &&
           x.n_valid <= x.logits.dim(-1));
}

}  // namespace

void xent_partial(const XentArgs& x, const Tensor& row_max, const Tensor& row_sumexp,
                  const Tensor& target_z) {
  check_xent(x);
  const int64_t N = x.targets.numel();
  VT_CHECK(row_max.numel() == N && row_sumexp.numel() == N && target_z.numel() == N);
  auto d = on("xent_partial", {&x.logits, &x.targets, &row_max, &row_sumexp, &target_z});
  const int64_t ld = x.logits.dim(-1), rows = x.logits.numel() / ld;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    namespace ca = cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    ca::need_float(x.logits);
    if (x.logits.dtype() == DType::kF32)
      cuda::xent_partial_forward(ca::f32p(x.logits), rows, ld, x.n_valid, x.col_offset,
                                 ca::ids_of(x.targets), x.cap, ca::f32_of(row_max),
                                 ca::f32_of(row_sumexp), ca::f32_of(target_z), s);
    else
      cuda::xent_partial_forward(ca::bf16p(x.logits), rows, ld, x.n_valid, x.col_offset,
                                 ca::ids_of(x.targets), x.cap, ca::f32_of(row_max),
                                 ca::f32_of(row_sumexp), ca::f32_of(target_z), s);
    return;
  }
#endif
  host::In lp(x.logits);
  cpu::xent_partial_forward<float>(lp, rows, ld, x.n_valid, x.col_offset, host::ids_of(x.targets),
                                   x.cap, host::f32_of(row_max), host::f32_of(row_sumexp),
                                   host::f32_of(target_z));
}

void xent_rescale(const Tensor& row_sumexp, const Tensor& row_max, const Tensor& global_max) {
  VT_CHECK(row_max.numel() == row_sumexp.numel() && global_max.numel() == row_sumexp.numel());
  auto d = on("xent_rescale", {&row_sumexp, &row_max, &global_max});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    namespace ca = cuda_acts;
    rt->on_device();
    cuda::xent_rescale(ca::f32_of(row_sumexp), ca::f32_of(row_max), ca::f32_of(global_max),
                       row_sumexp.numel(), rt->stream());
    return;
  }
#endif
  float* s = host::f32_of(row_sumexp);
  const float* m = host::f32_of(row_max);
  const float* g = host::f32_of(global_max);
  for (int64_t n = 0; n < row_sumexp.numel(); ++n) s[n] *= std::exp(m[n] - g[n]);
}

void xent_finish(const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_z,
                 const Tensor& lse, const Tensor& loss) {
  const int64_t N = lse.numel();
  VT_CHECK(row_max.numel() == N && row_sumexp.numel() == N && target_z.numel() == N &&
           loss.numel() == N);
  auto d = on("xent_finish", {&row_max, &row_sumexp, &target_z, &lse, &loss});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    namespace ca = cuda_acts;
    rt->on_device();
    cuda::xent_finish(ca::f32_of(row_max), ca::f32_of(row_sumexp), ca::f32_of(target_z),
                      ca::f32_of(lse), ca::f32_of(loss), N, rt->stream());
    return;
  }
#endif
  const float* m = host::f32_of(row_max);
  const float* s = host::f32_of(row_sumexp);
  const float* t = host::f32_of(target_z);
  float* l = host::f32_of(lse);
  float* o = host::f32_of(loss);
  for (int64_t n = 0; n < N; ++n) {
    l[n] = m[n] + std::log(s[n]);
    o[n] = l[n] - t[n];
  }
}

void xent_backward(const XentArgs& x, const Tensor& lse, float grad_scale, const Tensor& dlogits) {
  check_xent(x);
  VT_CHECK(dlogits.numel() == x.logits.numel() && lse.numel() == x.targets.numel());
  auto d = on("xent_backward", {&x.logits, &x.targets, &lse, &dlogits});
  const int64_t ld = x.logits.dim(-1), N = x.logits.numel() / ld;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* l = f32_of(lse);
    const int32_t* t = ids_of(x.targets);
    switch (mix_of({&x.logits, &dlogits})) {
      case Mix::kF32:
        cuda::xent_backward(f32p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                            grad_scale, f32p(dlogits), s);
        break;
      case Mix::kBF16:
        cuda::xent_backward(bf16p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                            grad_scale, bf16p(dlogits), s);
        break;
      case Mix::kMixed:  // the kernels take any (logits, dlogits) dtype pair directly
        if (x.logits.dtype() == DType::kF32)
          cuda::xent_backward(f32p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                              grad_scale, bf16p(dlogits), s);
        else
          cuda::xent_backward(bf16p(x.logits), N, ld, x.n_valid, x.col_offset, t, x.cap, l,
                              grad_scale, f32p(dlogits), s);
        break;
    }
    return;
  }
#endif
  host::In lp(x.logits);
  host::Out dp(dlogits);
  std::vector<float> dloss(N, grad_scale);
  cpu::xent_backward<float>(lp, N, ld, x.n_valid, x.col_offset, host::ids_of(x.targets), x.cap,
                            host::f32_of(lse), dloss.data(), dp);
}

void xent_loss_grad(const XentArgs& x, float grad_scale, const Tensor& lse, const Tensor& loss,
                    const Tensor& dlogits) {
  check_xent(x);
  const int64_t N = x.targets.numel();
  VT_CHECK(dlogits.numel() == x.logits.numel() && dlogits.dim(-1) == x.logits.dim(-1) &&
           lse.numel() == N && loss.numel() == N);
  const bool in_place = dlogits.raw() == x.logits.raw();
  VT_CHECK_MSG(!in_place || dlogits.dtype() == x.logits.dtype(),
               "xent_loss_grad in place needs one dtype for logits and dlogits");
  auto d = on("xent_loss_grad", {&x.logits, &x.targets, &lse, &loss, &dlogits});
  const int64_t ld = x.logits.dim(-1), rows = x.logits.numel() / ld;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const int32_t* t = ids_of(x.targets);
    float* l = f32_of(lse);
    float* o = f32_of(loss);
    const bool lf = x.logits.dtype() == DType::kF32, df = dlogits.dtype() == DType::kF32;
    cuda_acts::need_float(x.logits);
    cuda_acts::need_float(dlogits);
    if (lf && df)
      cuda::xent_loss_grad(f32p(x.logits), rows, ld, x.n_valid, x.col_offset, t, x.cap,
                           grad_scale, l, o, f32p(dlogits), s);
    else if (lf)
      cuda::xent_loss_grad(f32p(x.logits), rows, ld, x.n_valid, x.col_offset, t, x.cap,
                           grad_scale, l, o, bf16p(dlogits), s);
    else if (df)
      cuda::xent_loss_grad(bf16p(x.logits), rows, ld, x.n_valid, x.col_offset, t, x.cap,
                           grad_scale, l, o, f32p(dlogits), s);
    else
      cuda::xent_loss_grad(bf16p(x.logits), rows, ld, x.n_valid, x.col_offset, t, x.cap,
                           grad_scale, l, o, bf16p(dlogits), s);
    return;
  }
#endif
  if (in_place) {  // one window: the kernel reads each row whole before writing it
    host::InOut w(dlogits);
    cpu::xent_loss_grad<float>(w, rows, ld, x.n_valid, x.col_offset, host::ids_of(x.targets),
                               x.cap, grad_scale, host::f32_of(lse), host::f32_of(loss), w);
    return;
  }
  host::In lp(x.logits);
  host::Out dp(dlogits);
  cpu::xent_loss_grad<float>(lp, rows, ld, x.n_valid, x.col_offset, host::ids_of(x.targets), x.cap,
                             grad_scale, host::f32_of(lse), host::f32_of(loss), dp);
}

}  // namespace vt::ops
