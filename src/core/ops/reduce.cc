// The reduction op family (core/ops/reduce.h): checks, host sums, CUDA launches.
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"
#include "core/optim_math.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/elementwise.cuh"
#include "kernels/reduce.cuh"
#include "kernels/step_guard.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

double dot_host(const Tensor& a, const Tensor& b) {
  host::In ap(a), bp(b);
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(ap.p()[i]) * bp.p()[i];
  return s;
}

// Chunked fp64 sum (the host Newton-Schulz's normalization sums the same way).
double sum_squares_host(const Tensor& x) {
  host::In xp(x);
  const int64_t n = x.numel();
  constexpr int64_t kChunk = int64_t{1} << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(std::max<int64_t>(chunks, 1), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
      s += static_cast<double>(xp.p()[i]) * xp.p()[i];
    partial[c] = s;
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

#if VTRAIN_HAS_CUDA
// The runtime's shared fp64 reduction scratch, held for one reduction: kernels use it in stream
// order, so the next reduction may reuse it once this one's result is read or consumed.
struct Scratch {
  std::lock_guard<std::mutex> lock;
  double* partials;
  double* res;
  explicit Scratch(CudaRuntime* rt)
      : lock(rt->scratch_mutex()), partials(rt->reduction_partials()), res(rt->reduction_result()) {}
};

// sum(x^2) of an f32 or bf16 device tensor into sc.res (added to it with `accumulate`).
void sum_squares_into(const Tensor& x, const Scratch& sc, bool accumulate, cudaStream_t s) {
  if (x.dtype() == DType::kF32)
    cuda::sum_squares(cuda_acts::f32p(x), x.numel(), sc.partials, sc.res, accumulate, s);
  else
    cuda::sum_squares(cuda_acts::bf16p(x), x.numel(), sc.partials, sc.res, accumulate, s);
}
#endif

}  // namespace

double dot(const Tensor& a, const Tensor& b) {
  VT_CHECK(a.numel() == b.numel());
  need_float("dot", a);
  need_float("dot", b);
  if (a.numel() == 0) return 0.0;
  auto d = on("dot", {&a, &b});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const Scratch sc(rt);
    const int64_t n = a.numel();
    on_acts(s, [&](auto ap, auto bp) { cuda::dot(ap, bp, n, sc.partials, sc.res, false, s); },
            in(a), in(b));
    return rt->fetch_result(sc.res);
  }
#endif
  return dot_host(a, b);
}

double sum_squares(const Tensor& x) {
  need_float("sum_squares", x);
  if (x.numel() == 0) return 0.0;
  auto d = on("sum_squares", {&x});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const Scratch sc(rt);
    sum_squares_into(x, sc, false, rt->stream());
    return rt->fetch_result(sc.res);
  }
#endif
  return sum_squares_host(x);
}

// Not profiled (as before: no dispatch scope).
double sum_squares_list(const std::vector<Tensor>& xs) {
  if (xs.empty()) return 0.0;
  for (const Tensor& x : xs) {
    need_float("sum_squares_list", x);
    VT_CHECK_MSG(x.device() == xs[0].device(), "sum_squares_list: tensors on different devices");
  }
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = backend(xs[0].device()).cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const Scratch sc(rt);
    bool first = true;
    for (const Tensor& x : xs) {
      if (x.numel() == 0) continue;
      sum_squares_into(x, sc, !first, rt->stream());
      first = false;
    }
    if (first) return 0.0;
    return rt->fetch_result(sc.res);
  }
#endif
  double total = 0.0;
  for (const Tensor& x : xs) total += x.numel() ? sum_squares_host(x) : 0.0;
  return total;
}

void step_guard(const std::vector<Tensor>& grads, const Tensor& losses, double max_grad_norm,
                const Tensor& scalars) {
  need_f32("step_guard", scalars, "the step's scalars");
  VT_CHECK_MSG(scalars.numel() >= kGuardFloats, "step_guard: the scalars hold " << scalars.numel()
                                                    << " floats, the guard " << kGuardFloats);
  if (losses.defined()) need_f32("step_guard", losses, "the losses");
  for (const Tensor& g : grads) {
    need_float("step_guard", g);
    VT_CHECK_MSG(g.device() == scalars.device(), "step_guard: a gradient on another device");
  }
  const int64_t n_losses = losses.defined() ? losses.numel() : 0;
  auto d = n_losses ? on("step_guard", {&scalars, &losses}) : on("step_guard", {&scalars});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const Scratch sc(rt);
    // sum_squares_list's launches (its bits), the result left in the scratch for the guard.
    bool first = true;
    for (const Tensor& x : grads) {
      if (x.numel() == 0) continue;
      sum_squares_into(x, sc, !first, s);
      first = false;
    }
    if (first) VT_CUDA_CHECK(cudaMemsetAsync(sc.res, 0, sizeof(double), s));
    cuda::step_guard(sc.res, n_losses ? f32p(losses) : nullptr, n_losses, max_grad_norm,
                     f32p(scalars), s);
    return;
  }
#endif
  const double sum = sum_squares_list(grads);
  const double norm = std::sqrt(sum);
  bool finite = std::isfinite(norm);
  if (n_losses) {
    host::In lp(losses);
    for (int64_t i = 0; i < n_losses && finite; ++i) finite = std::isfinite(lp.p()[i]);
  }
  const double scale =
      max_grad_norm <= 0.0 || !(norm > max_grad_norm) ? 1.0 : max_grad_norm / (norm + 1e-6);
  host::InOut gp(scalars);
  gp.p()[kGuardGradScale] = static_cast<float>(scale);
  gp.p()[kGuardApply] = finite ? 1.0f : 0.0f;
  std::memcpy(gp.p() + kGuardSumSquares, &sum, sizeof sum);
}

double guard_sum_squares(const float* guard) {
  double s = 0.0;
  std::memcpy(&s, guard + kGuardSumSquares, sizeof s);
  return s;
}

void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index) {
  VT_CHECK(a.numel() == b.numel());
  need_float("dot_into", a);
  need_float("dot_into", b);
  need_f32("dot_into", out, "the coefficient");
  VT_CHECK_MSG(index >= 0 && index < out.numel(),
               "dot_into: coefficient index " << index << " outside " << out.numel());
  auto d = on("dot_into", {&a, &b, &out});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    float* dst = f32_of(out) + index;
    const int64_t n = a.numel();
    // The fp64 result goes through the shared reduction scratch (stream-ordered, so the next
    // reduction may reuse it) into the fp32 element.
    const Scratch sc(rt);
    if (n == 0) {
      VT_CUDA_CHECK(cudaMemsetAsync(dst, 0, sizeof(float), s));
      return;
    }
    on_acts(s, [&](auto ap, auto bp) { cuda::dot(ap, bp, n, sc.partials, sc.res, false, s); },
            in(a), in(b));
    cuda::double_to_float(sc.res, dst, s);
    return;
  }
#endif
  host::f32_of(out)[index] = static_cast<float>(a.numel() ? dot_host(a, b) : 0.0);
}

void normalize_frobenius(const Tensor& x, double scale, double eps) {
  need_float("normalize_frobenius", x);
  if (x.numel() == 0) return;
  auto d = on("normalize_frobenius", {&x});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const Scratch sc(rt);
    sum_squares_into(x, sc, false, s);
    if (x.dtype() == DType::kF32)
      cuda::div_by_norm(f32p(x), x.numel(), sc.res, scale, eps, s);
    else
      cuda::div_by_norm(bf16p(x), x.numel(), sc.res, scale, eps, s);
    return;
  }
#endif
  // The host Newton-Schulz's normalization exactly: chunked fp64 sum, division in double.
  const double dn = std::sqrt(sum_squares_host(x)) * scale + eps;
  host::InOut xp(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    xp.p()[i] = static_cast<float>(static_cast<double>(xp.p()[i]) / dn);
}

void normalize_frobenius(const Tensor& x, double scale, double eps, const Tensor& out) {
  need_f32("normalize_frobenius", x, "x");
  need_float("normalize_frobenius", out);
  VT_CHECK_MSG(out.numel() == x.numel(), "normalize_frobenius: out holds " << out.numel()
                                             << " elements, x " << x.numel());
  VT_CHECK_MSG(out.raw() != x.raw() || x.numel() == 0, "normalize_frobenius: out aliases x");
  if (x.numel() == 0) return;
  if (out.dtype() == DType::kF32) {  // the in-place op on a copy: the same bits
    out.copy_from(x);
    normalize_frobenius(out, scale, eps);
    return;
  }
  auto d = on("normalize_frobenius", {&x, &out});
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const Scratch sc(rt);
    sum_squares_into(x, sc, false, s);
    cuda::div_by_norm_to(f32p(x), bf16p(out), x.numel(), sc.res, scale, eps, s);
    return;
  }
#endif
  const double dn = std::sqrt(sum_squares_host(x)) * scale + eps;
  host::In xp(x);
  std::vector<float> q(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i)
    q[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(xp.p()[i]) / dn);
  const Tensor f = Tensor::from_host(q.data(), {x.numel()}, Device::kCPU);
  out.copy_from(f.to(out.device(), out.dtype()).reshaped(out.shape()));  // the cast's rounding
}

namespace {

// out == x (undefined out) in place. Checks, then per segment on the host backends, or the two
// segmented kernels on the CUDA backend.
void normalize_segments(const Tensor& x, int64_t segments, double scale, double eps,
                        const Tensor& out) {
  need_f32("normalize_frobenius_segments", x, "x");
  VT_CHECK_MSG(segments >= 1 && x.numel() % segments == 0,
               "normalize_frobenius_segments: " << x.numel() << " elements are not " << segments
                                                << " equal segments");
  const bool in_place = !out.defined();
  if (!in_place) {
    need_float("normalize_frobenius_segments", out);
    VT_CHECK_MSG(out.numel() == x.numel(), "normalize_frobenius_segments: out holds "
                                               << out.numel() << " elements, x " << x.numel());
    VT_CHECK_MSG(out.raw() != x.raw() || x.numel() == 0,
                 "normalize_frobenius_segments: out aliases x");
  }
  if (x.numel() == 0) return;
  const int64_t n = x.numel() / segments;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = backend(x.device()).cuda()) {
    using namespace cuda_acts;
    auto d = in_place ? on("normalize_frobenius_segments", {&x})
                      : on("normalize_frobenius_segments", {&x, &out});
    rt->on_device();
    const cudaStream_t s = rt->stream();
    VT_CHECK_MSG(segments <= 65535, "normalize_frobenius_segments: at most 65535 segments, got "
                                        << segments);
    // fp64 scratch (stream-ordered: freed after the kernels that use it): every segment's
    // block partials, then the segments' sums.
    const int64_t partials = segments * cuda::segment_partials(n);
    const Tensor scratch = Tensor::empty({2 * (partials + segments)}, DType::kF32, x.device());
    double* ps = static_cast<double*>(scratch.raw());
    double* sums = ps + partials;
    cuda::sum_squares_segments(f32p(x), n, segments, ps, sums, s);
    const Tensor& y = in_place ? x : out;
    if (y.dtype() == DType::kF32)
      cuda::div_by_norm_segments(f32p(x), f32p(y), n, segments, sums, scale, eps, s);
    else
      cuda::div_by_norm_segments(f32p(x), bf16p(y), n, segments, sums, scale, eps, s);
    return;
  }
#endif
  for (int64_t k = 0; k < segments; ++k) {  // the per-segment op itself
    if (in_place)
      normalize_frobenius(x.flat(k * n, n), scale, eps);
    else
      normalize_frobenius(x.flat(k * n, n), scale, eps, out.flat(k * n, n));
  }
}

}  // namespace

void normalize_frobenius_segments(const Tensor& x, int64_t segments, double scale, double eps) {
  normalize_segments(x, segments, scale, eps, Tensor());
}

void normalize_frobenius_segments(const Tensor& x, int64_t segments, double scale, double eps,
                                  const Tensor& out) {
  normalize_segments(x, segments, scale, eps, out);
}

}  // namespace vt::ops
