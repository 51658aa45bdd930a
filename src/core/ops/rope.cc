// The rotary-embedding op family (core/ops/rope.h), RoPE fused with QK-norm included: checks, the
// host path, the CUDA launches.
#include "core/ops/rope.h"

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/rope.cuh"
#endif

namespace vt::ops {

using namespace detail;

namespace {

// y = rope(x) (or its inverse when backward) on the dispatched backend.
void run_rope(const Dispatch& d, const Tensor& x, const Tensor& y, double base,
              int64_t pos_offset, bool backward) {
  const int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), hd = x.dim(3);
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    VT_CHECK_MSG(hd % 2 == 0 && hd >= 2, "rope needs an even head dim, got " << hd);
    VT_CHECK_MSG(pos_offset >= 0, "rope position offset must be >= 0, got " << pos_offset);
    const float2* table = rt->rope_table(hd, base, T + pos_offset);
    on_acts(
        s,
        [&](auto xp, auto yp) {
          if (backward)
            cuda::rope_backward(xp, yp, B, T, H, hd, table, pos_offset, s);
          else
            cuda::rope_forward(xp, yp, B, T, H, hd, table, pos_offset, s);
        },
        in(x), out(y));
    return;
  }
#endif
  host::In xp(x);
  host::Out yp(y);
  if (backward)
    cpu::rope_backward<float>(xp, yp, B, T, H, hd, base, pos_offset);
  else
    cpu::rope_forward<float>(xp, yp, B, T, H, hd, base, pos_offset);
}

// Whether two tensors' bytes overlap (empty or undefined ones overlap nothing).
bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// The checks both fused ops make: x (B, T, heads, hd) with hd even, a float dtype shared with
// `other` (y or dy) and `out` (y or dx), rstd f32 with one entry per (b, t, head), `out` either
// `other`'s storage exactly or apart from it, rstd apart from all of them, and a position offset
// >= 0.
void check_rope_rmsnorm(const char* op, const Tensor& x, const Tensor& other, const char* other_name,
                        const Tensor& out, const char* out_name, const Tensor& rstd,
                        int64_t pos_offset) {
  VT_CHECK_MSG(x.defined() && x.ndim() == 4,
               op << ": x must be (B, T, heads, head_dim), got " << x.ndim() << " dimensions");
  const int64_t hd = x.dim(3);
  VT_CHECK_MSG(hd >= 2 && hd % 2 == 0, op << ": head_dim must be even, got " << hd);
  need_float(op, x);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&other, other_name},
                                std::pair<const Tensor*, const char*>{&out, out_name}}) {
    VT_CHECK_MSG(t->defined() && t->numel() == x.numel(),
                 op << ": " << name << " has " << t->numel() << " elements, x " << x.numel());
    VT_CHECK_MSG(t->dtype() == x.dtype(), op << ": " << name << " is " << dtype_name(t->dtype())
                                             << ", x " << dtype_name(x.dtype())
                                             << " (one dtype for the fused op)");
  }
  const int64_t heads_total = x.numel() / hd;
  VT_CHECK_MSG(rstd.defined() && rstd.numel() == heads_total,
               op << ": rstd has " << rstd.numel() << " entries for " << heads_total
                  << " (b, t, head) vectors");
  need_f32(op, rstd, "rstd");
  VT_CHECK_MSG(pos_offset >= 0, op << ": position offset must be >= 0, got " << pos_offset);
  const bool same = out.raw() == other.raw() && out.nbytes() == other.nbytes();
  VT_CHECK_MSG(same || !overlap(out, other),
               op << ": " << out_name << " partly overlaps " << other_name
                  << " (it may be the same tensor, or apart from it)");
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&x, "x"},
                                std::pair<const Tensor*, const char*>{&other, other_name},
                                std::pair<const Tensor*, const char*>{&out, out_name}})
    VT_CHECK_MSG(!overlap(rstd, *t), op << ": rstd overlaps " << name);
}

#if VTRAIN_HAS_CUDA
// The kernels keep up to 8 pairs per lane in registers: head dims up to 512.
constexpr int64_t kCudaMaxHeadDim = 512;
#endif

}  // namespace

void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset) {
  VT_CHECK(x.ndim() == 4 && y.numel() == x.numel() && x.dim(3) % 2 == 0);
  run_rope(on("rope", {&x, &y}), x, y, base, pos_offset, false);
}

void rope_backward(const Tensor& dy, const Tensor& dx, double base, int64_t pos_offset) {
  VT_CHECK(dy.ndim() == 4 && dx.numel() == dy.numel() && dy.dim(3) % 2 == 0);
  run_rope(on("rope_backward", {&dy, &dx}), dy, dx, base, pos_offset, true);
}

void rope_rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, double base, float scale,
                  double eps, int64_t pos_offset) {
  const char* op = "rope_rmsnorm";
  check_rope_rmsnorm(op, x, x, "x", y, "y", rstd, pos_offset);
  auto d = on("rope_rmsnorm", {&x, &y, &rstd});
  if (x.numel() == 0) return;
  const int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), hd = x.dim(3);
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    VT_CHECK_MSG(hd <= kCudaMaxHeadDim, op << ": head_dim " << hd << " > " << kCudaMaxHeadDim
                                           << " on the CUDA backend");
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float2* table = rt->rope_table(hd, base, T + pos_offset);
    float* r = f32_of(rstd);
    const float e = static_cast<float>(eps);
    // One dtype (checked above): on_acts runs the f32 or the bf16 kernel, never the mixed path.
    on_acts(
        s,
        [&](auto xp, auto yp) {
          cuda::rope_rmsnorm_forward(xp, yp, r, B, T, H, hd, table, pos_offset, scale, e, s);
        },
        in(x), out(y));
    return;
  }
#endif
  host::In xp(x);
  host::Out yp(y);
  cpu::rope_rmsnorm_forward<float>(xp, yp, host::f32_of(rstd), B, T, H, hd, base, scale, eps,
                                   pos_offset);
}

void rope_rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                           double base, float scale, int64_t pos_offset) {
  const char* op = "rope_rmsnorm_backward";
  check_rope_rmsnorm(op, x, dy, "dy", dx, "dx", rstd, pos_offset);
  VT_CHECK_MSG(!overlap(dx, x), op << ": dx overlaps x (the saved input the gradient reads)");
  auto d = on("rope_rmsnorm_backward", {&x, &rstd, &dy, &dx});
  if (x.numel() == 0) return;
  const int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), hd = x.dim(3);
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    VT_CHECK_MSG(hd <= kCudaMaxHeadDim, op << ": head_dim " << hd << " > " << kCudaMaxHeadDim
                                           << " on the CUDA backend");
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float2* table = rt->rope_table(hd, base, T + pos_offset);
    const float* r = f32_of(rstd);
    on_acts(
        s,
        [&](auto xp, auto dyp, auto dxp) {
          cuda::rope_rmsnorm_backward(xp, r, dyp, dxp, B, T, H, hd, table, pos_offset, scale, s);
        },
        in(x), in(dy), out(dx));
    return;
  }
#endif
  host::In xp(x), dyp(dy);
  host::Out dxp(dx);
  cpu::rope_rmsnorm_backward<float>(xp, host::f32_of(rstd), dyp, dxp, B, T, H, hd, base, scale,
                                    pos_offset);
}

}  // namespace vt::ops
