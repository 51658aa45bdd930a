// The elementwise algebra op family (core/ops/elementwise.h): checks, host loops, CUDA launches.
#include "core/ops/elementwise.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/cast.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/value_mix.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

void check_coef(const char* op, const Tensor& coef, int64_t index) {
  need_f32(op, coef, "the coefficient");
  VT_CHECK_MSG(index >= 0 && index < coef.numel(),
               op << ": coefficient index " << index << " outside " << coef.numel());
}

// y = alpha * x on the host; y may alias x.
void scale_copy_host(const Tensor& y, const Tensor& x, float alpha) {
  host::In xp(x);
  std::vector<float> tmp(xp.p(), xp.p() + x.numel());  // y may alias x
  host::Out yp(y);
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) yp.p()[i] = alpha * tmp[i];
}

}  // namespace

namespace detail {

void cast_on(Backend& b, const Tensor& y, const Tensor& x) {
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = b.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    VT_CHECK(y.numel() == x.numel());
    if (x.numel() == 0) return;
    if (y.dtype() == x.dtype()) {
      if (y.raw() != x.raw())
        VT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, s));
    } else if (x.dtype() == DType::kF32 && y.dtype() == DType::kBF16) {
      cuda::cast_f32_to_bf16(f32p(x), bf16p(y), x.numel(), s);
    } else if (x.dtype() == DType::kBF16 && y.dtype() == DType::kF32) {
      cuda::cast_bf16_to_f32(bf16p(x), f32p(y), x.numel(), s);
    } else {
      VT_CHECK_MSG(false, "cuda: no conversion " << dtype_name(x.dtype()) << " -> "
                                                 << dtype_name(y.dtype()));
    }
    return;
  }
#endif
  host::In xi(x);
  host::Out yo(y);
  std::copy(xi.p(), xi.p() + x.numel(), yo.p());
}

void axpy_on(Backend& b, const Tensor& y, const Tensor& x, float alpha) {
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = b.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const int64_t n = y.numel();
    on_acts(s, [&](auto yp, auto xp) { cuda::value_axpy(alpha, xp, yp, n, s); }, inout(y), in(x));
    return;
  }
#endif
  host::InOut yp(y);
  host::In xp(x);
  const int64_t n = y.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) yp.p()[i] += alpha * xp.p()[i];
}

}  // namespace detail

void axpy(const Tensor& y, const Tensor& x, float alpha) {
  VT_CHECK_MSG(y.numel() == x.numel(), "axpy: " << y.numel() << " vs " << x.numel() << " elements");
  VT_CHECK_MSG(y.dtype() == x.dtype(), "axpy: dtypes differ");
  need_float("axpy", y);
  if (y.numel() == 0) return;
  auto d = on("axpy", {&y, &x});
  axpy_on(d.backend(), y, x, alpha);
}

void scale_copy(const Tensor& y, const Tensor& x, float alpha) {
  VT_CHECK_MSG(y.numel() == x.numel(), "scale_copy: element counts differ");
  VT_CHECK_MSG(y.dtype() == x.dtype(), "scale_copy: dtypes differ");
  need_float("scale_copy", y);
  if (y.numel() == 0) return;
  auto d = on("scale_copy", {&y, &x});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const int64_t n = y.numel();
    // y = alpha * x is value_mix2 with no second source; y may alias x (elementwise).
    on_acts(
        s,
        [&](auto yp, auto xp) {
          using E = std::remove_pointer_t<decltype(xp)>;
          cuda::value_mix2(alpha, xp, 0.0f, static_cast<const E*>(nullptr), yp, n, s);
        },
        out(y), in(x));
    return;
  }
#endif
  scale_copy_host(y, x, alpha);
}

void copy(const Tensor& y, const Tensor& x) {
  VT_CHECK_MSG(y.numel() == x.numel(), "copy: " << y.numel() << " vs " << x.numel() << " elements");
  if (y.numel() == 0) return;
  if (y.dtype() == x.dtype()) {
    y.copy_from(x);
    return;
  }
  if (y.device() == x.device()) {
    auto d = on("copy", {&y, &x});
    cast_on(d.backend(), y, x);
    return;
  }
  y.copy_from(x.to(y.device(), y.dtype()));
}

void add_scalar(const Tensor& t, int64_t index, double value) {
  need_f32("add_scalar", t, "the tensor");
  VT_CHECK(index >= 0 && index < t.numel());
  auto d = on("add_scalar", {&t});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    rt->on_device();
    cuda::add_scalar(cuda_acts::f32_of(t), index, static_cast<float>(value), rt->stream());
    return;
  }
#endif
  host::f32_of(t)[index] += static_cast<float>(value);
}

void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) {
  VT_CHECK_MSG(y.numel() == x.numel() && y.dtype() == x.dtype(), "scale_copy_coef: y and x differ");
  need_float("scale_copy_coef", y);
  check_coef("scale_copy_coef", coef, index);
  if (y.numel() == 0) return;
  auto d = on("scale_copy_coef", {&y, &x, &coef});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* c = f32_of(coef) + index;
    VT_CHECK_MSG(x.dtype() == y.dtype(), "scale_copy_coef: x and y must share a dtype");
    on_acts(s, [&](auto yp, auto xp) { cuda::scale_copy_coef(xp, yp, x.numel(), c, s); }, out(y),
            in(x));
    return;
  }
#endif
  scale_copy_host(y, x, host::f32_of(coef)[index]);
}

void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) {
  VT_CHECK_MSG(y.numel() == x.numel() && y.dtype() == x.dtype(), "axpy_coef: y and x differ");
  need_float("axpy_coef", y);
  check_coef("axpy_coef", coef, index);
  if (y.numel() == 0) return;
  auto d = on("axpy_coef", {&y, &x, &coef});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* c = f32_of(coef) + index;
    VT_CHECK_MSG(x.dtype() == y.dtype(), "axpy_coef: x and y must share a dtype");
    on_acts(s, [&](auto yp, auto xp) { cuda::axpy_coef(xp, yp, x.numel(), c, s); }, inout(y),
            in(x));
    return;
  }
#endif
  axpy_on(d.backend(), y, x, host::f32_of(coef)[index]);
}

void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols, int64_t batch) {
  VT_CHECK_MSG(batch >= 1, "transpose: a batch of " << batch << " matrices");
  const int64_t mn = rows * cols;
  VT_CHECK(x.numel() == batch * mn && y.numel() == batch * mn && x.dtype() == y.dtype());
  if (x.numel() == 0) return;
  if (batch > 1 && x.dtype() != DType::kF32) {  // one matrix at a time
    for (int64_t i = 0; i < batch; ++i) transpose(y.flat(i * mn, mn), x.flat(i * mn, mn), rows, cols);
    return;
  }
  auto d = on("transpose", {&y, &x});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    VT_CHECK_MSG(y.dtype() == x.dtype(), "transpose: dtypes differ");
    switch (x.dtype()) {
      case DType::kF32:
        if (batch > 1)
          cuda::transpose_batched(f32p(x), f32p(y), batch, rows, cols, s);
        else
          cuda::transpose(f32p(x), f32p(y), rows, cols, s);
        break;
      case DType::kBF16: cuda::transpose(bf16p(x), bf16p(y), rows, cols, s); break;
      case DType::kI32:
        cuda::transpose(static_cast<const int32_t*>(x.raw()), static_cast<int32_t*>(y.raw()),
                        rows, cols, s);
        break;
    }
    return;
  }
#endif
  host::In xp(x);
  host::Out yp(y);
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = xp.p() + b * mn;
    float* yb = yp.p() + b * mn;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) yb[c * rows + r] = xb[r * cols + c];
  }
}

}  // namespace vt::ops
