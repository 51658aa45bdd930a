// The embedding op family (core/ops/embedding.h): checks, the host path, the CUDA launches.
#include "core/ops/embedding.h"

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/host_window.h"
#include "core/ops/rows.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/embedding.cuh"
#endif

namespace vt::ops {

using namespace detail;

void embedding(const Tensor& table, int64_t row_begin, const Tensor& ids, const Tensor& out) {
  need_f32("embedding", table, "the table");
  VT_CHECK_MSG(ids.dtype() == DType::kI32, "embedding: ids must be i32");
  VT_CHECK(out.dim(-1) == table.dim(-1) && rows_of(out) == ids.numel());
  auto d = on("embedding", {&table, &ids, &out});
  const int64_t rows = table.dim(0), C = table.dim(-1), N = ids.numel();
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    namespace ca = cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    const float* tab = ca::f32_of(table);
    ca::need_float(out);
    if (out.dtype() == DType::kF32)
      cuda::embedding_forward(tab, row_begin, rows, C, ca::ids_of(ids), N, ca::f32p(out), s);
    else
      cuda::embedding_forward(tab, row_begin, rows, C, ca::ids_of(ids), N, ca::bf16p(out), s);
    return;
  }
#endif
  host::Out op(out);
  cpu::embedding_forward<float>(host::f32_of(table), row_begin, rows, C, host::ids_of(ids), N,
                                op);
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_begin,
                        const Tensor& dtable) {
  need_f32("embedding_backward", dtable, "the table gradient");
  VT_CHECK_MSG(ids.dtype() == DType::kI32, "embedding_backward: ids must be i32");
  VT_CHECK(dout.dim(-1) == dtable.dim(-1) && rows_of(dout) == ids.numel());
  auto d = on("embedding_backward", {&dout, &ids, &dtable});
  const int64_t rows = dtable.dim(0), C = dtable.dim(-1), N = ids.numel();
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    namespace ca = cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    float* dt = ca::f32_of(dtable);
    ca::need_float(dout);
    if (dout.dtype() == DType::kF32)
      cuda::embedding_backward(ca::f32p(dout), ca::ids_of(ids), N, row_begin, rows, C, dt, s);
    else
      cuda::embedding_backward(ca::bf16p(dout), ca::ids_of(ids), N, row_begin, rows, C, dt, s);
    return;
  }
#endif
  host::In dp(dout);
  cpu::embedding_backward<float>(dp, host::ids_of(ids), N, row_begin, rows, C,
                                 host::f32_of(dtable));
}

}  // namespace vt::ops
