// How the CUDA side of an op family sees its tensors: typed device pointers, and the f32/bf16
// dispatch of activation arguments (on_acts) that runs the f32 kernel when every activation is
// f32, the bf16 kernel when every one is bf16, and fp32 temporaries for a call that mixes them
// (widened where read, rounded back where written: what the CPU backend computes). Host-only
// header for builds with CUDA; the pointers are device memory of the runtime's device.
#pragma once
#if VTRAIN_HAS_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/tensor.h"
#include "kernels/cast.cuh"
#include "kernels/cuda_check.cuh"

namespace vt::cuda_acts {

using bf16 = __nv_bfloat16;

inline float* f32p(const Tensor& t) { return static_cast<float*>(t.raw()); }
inline bf16* bf16p(const Tensor& t) { return static_cast<bf16*>(t.raw()); }

inline float* f32_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32,
               "cuda backend: expected an f32 tensor, got " << dtype_name(t.dtype()));
  return f32p(t);
}
inline const float* maybe_f32(const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; }
inline float* maybe_f32_out(const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; }
inline const int32_t* ids_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kI32, "cuda backend: ids must be i32");
  return static_cast<const int32_t*>(t.raw());
}
inline void need_float(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
               "cuda backend: expected an f32 or bf16 tensor, got " << dtype_name(t.dtype()));
}

// The common dtype of a call's activation arguments, or kMixed.
enum class Mix { kF32, kBF16, kMixed };
inline Mix mix_of(std::initializer_list<const Tensor*> ts) {
  bool all_f32 = true, all_bf16 = true;
  for (const Tensor* t : ts) {
    need_float(*t);
    all_f32 = all_f32 && t->dtype() == DType::kF32;
    all_bf16 = all_bf16 && t->dtype() == DType::kBF16;
  }
  return all_f32 ? Mix::kF32 : (all_bf16 ? Mix::kBF16 : Mix::kMixed);
}

// An fp32 device view of an f32 or bf16 tensor for the mixed-dtype path: the tensor's own memory
// when it is f32; for bf16, a stream-ordered fp32 temporary, widened from the tensor when
// `reads`, rounded back into it (round to nearest even) when `writes` and the view closes.
class F32View {
 public:
  F32View(const Tensor& t, bool reads, bool writes, cudaStream_t s)
      : t_(t), writes_(writes), s_(s) {
    need_float(t);
    if (t.dtype() == DType::kF32) {
      p_ = f32p(t);
      return;
    }
    owned_ = true;
    const size_t bytes = std::max<size_t>(sizeof(float), sizeof(float) * size_t(t.numel()));
    VT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, s_));
    if (reads) cuda::cast_bf16_to_f32(bf16p(t), p_, t.numel(), s_);
  }
  ~F32View() {
    if (!owned_) return;
    if (writes_) cuda::cast_f32_to_bf16(p_, bf16p(t_), t_.numel(), s_);
    VT_CUDA_CHECK(cudaFreeAsync(p_, s_));
  }
  F32View(const F32View&) = delete;
  F32View& operator=(const F32View&) = delete;
  float* p() const { return p_; }

 private:
  Tensor t_;
  bool writes_;
  cudaStream_t s_;
  bool owned_ = false;
  float* p_ = nullptr;
};

// An activation argument of a call and how its kernel uses it.
struct Act {
  const Tensor& t;
  bool reads, writes;
};
inline Act in(const Tensor& t) { return {t, true, false}; }
inline Act out(const Tensor& t) { return {t, false, true}; }
inline Act inout(const Tensor& t) { return {t, true, true}; }
// Written, and read first when the kernel accumulates into it.
inline Act acc(const Tensor& t, bool accumulate) { return {t, accumulate, true}; }

// Calls f with one device pointer per argument, all of one element type (see the top).
template <class F, class... A>
void on_acts(cudaStream_t s, F&& f, const A&... acts) {
  switch (mix_of({&acts.t...})) {
    case Mix::kF32: f(f32p(acts.t)...); return;
    case Mix::kBF16: f(bf16p(acts.t)...); return;
    case Mix::kMixed: {
      F32View views[] = {F32View(acts.t, acts.reads, acts.writes, s)...};
      [&]<size_t... I>(std::index_sequence<I...>) { f(views[I].p()...); }(
          std::index_sequence_for<A...>{});
    }
  }
}

}  // namespace vt::cuda_acts

#endif  // VTRAIN_HAS_CUDA
