// The rotary-embedding op family (core/ops/rope.h): checks, the host path, the CUDA launches.
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

}  // namespace

void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset) {
  VT_CHECK(x.ndim() == 4 && y.numel() == x.numel() && x.dim(3) % 2 == 0);
  run_rope(on("rope", {&x, &y}), x, y, base, pos_offset, false);
}

void rope_backward(const Tensor& dy, const Tensor& dx, double base, int64_t pos_offset) {
  VT_CHECK(dy.ndim() == 4 && dx.numel() == dy.numel() && dy.dim(3) % 2 == 0);
  run_rope(on("rope_backward", {&dy, &dx}), dy, dx, base, pos_offset, true);
}

}  // namespace vt::ops
