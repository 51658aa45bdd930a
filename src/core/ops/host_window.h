// How the host side of an op family sees its tensors (the CPU backend, and the device emulator
// whose tensors are host memory tagged Device::kCUDA): every op computes with the fp32 kernels
// of cpu_kernels.h; bf16 tensors are widened to fp32 for the kernel and rounded back to bf16
// (round-to-nearest-even) when written, which is what the GPU kernels do with fp32 math on bf16
// storage.
#pragma once
#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/tensor.h"

namespace vt::host {

// An fp32 window onto a tensor's elements: the memory itself for f32 tensors, a widened copy for
// bf16 ones (written back, rounded, when `writes` and the window closes).
class F32 {
 public:
  F32(const Tensor& t, bool reads = true, bool writes = false) : t_(t), writes_(writes) {
    if (t.dtype() == DType::kF32) {
      p_ = static_cast<float*>(t.raw());
      return;
    }
    VT_CHECK_MSG(t.dtype() == DType::kBF16, "expected an f32 or bf16 tensor, got "
                                                << dtype_name(t.dtype()));
    buf_.resize(t.numel());
    if (reads) {
      const uint16_t* h = static_cast<const uint16_t*>(t.raw());
      for (int64_t i = 0; i < t.numel(); ++i) buf_[i] = bf16_to_f32(h[i]);
    }
    p_ = buf_.data();
  }
  ~F32() {
    if (!writes_ || t_.dtype() != DType::kBF16) return;
    uint16_t* h = static_cast<uint16_t*>(t_.raw());
    for (int64_t i = 0; i < t_.numel(); ++i) h[i] = f32_to_bf16(buf_[i]);
  }
  F32(const F32&) = delete;
  F32& operator=(const F32&) = delete;
  float* p() const { return p_; }
  operator float*() const { return p_; }

 private:
  Tensor t_;
  bool writes_;
  float* p_ = nullptr;
  std::vector<float> buf_;
};

// Read-only, write-only and read-write windows.
struct In : F32 { explicit In(const Tensor& t) : F32(t, true, false) {} };
struct Out : F32 { explicit Out(const Tensor& t) : F32(t, false, true) {} };
struct InOut : F32 { explicit InOut(const Tensor& t) : F32(t, true, true) {} };

inline const int32_t* ids_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kI32, "ids must be i32");
  return static_cast<const int32_t*>(t.raw());
}
inline float* f32_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32, "expected an f32 tensor, got " << dtype_name(t.dtype()));
  return static_cast<float*>(t.raw());
}
inline const float* maybe_f32(const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; }

}  // namespace vt::host
