// Tensor storage on any device, shapes and small utilities.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/backend.h"
#include "core/ops/cast_on.h"
#include "core/bf16.h"
#include "core/op_profile.h"

namespace vt {

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  return make(std::move(shape), dtype, device, true);
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  return make(std::move(shape), dtype, device, false);
}

Tensor Tensor::make(Shape shape, DType dtype, Device device, bool zero) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  const size_t bytes = t.nbytes();
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  if (device == Device::kCPU) {
    op_profile::Scope profile(zero ? "host_alloc_zeroed" : "host_alloc");
    void* p = std::aligned_alloc(64, alloc);
    VT_CHECK_MSG(p != nullptr, "out of memory allocating " << bytes << " bytes");
    if (zero) std::memset(p, 0, alloc);
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    t.data_ = p;
    return t;
  }
  Backend* b = &backend(device);
  void* p = zero ? b->alloc(alloc) : b->alloc_uninitialized(alloc);
  t.storage_ = std::shared_ptr<void>(p, [b](void* q) { b->release(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::from_host(const float* data, Shape shape, Device device) {
  Tensor host = view(const_cast<float*>(data), shape, DType::kF32, Device::kCPU);
  return host.to(device);
}

Tensor Tensor::from_host(const int32_t* data, Shape shape, Device device) {
  Tensor host = view(const_cast<int32_t*>(data), shape, DType::kI32, Device::kCPU);
  return host.to(device);
}

Tensor Tensor::view(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

void Tensor::check_host(DType want) const {
  VT_CHECK_MSG(device_ == Device::kCPU,
               "host access to a device tensor " << shape_str(shape_)
                                                 << " (copy it with to(Device::kCPU))");
  VT_CHECK_MSG(dtype_ == want, "tensor is " << dtype_name(dtype_) << ", accessed as "
                                            << dtype_name(want));
}

Tensor Tensor::reshaped(Shape shape) const {
  VT_CHECK_MSG(shape_numel(shape) == numel(), "reshape " << shape_str(shape_) << " -> " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::flat(int64_t offset, int64_t n) const {
  VT_CHECK_MSG(offset >= 0 && n >= 0 && offset + n <= numel(),
               "flat view [" << offset << ", " << offset + n << ") of " << numel() << " elements");
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + offset * dtype_size(dtype_);
  t.shape_ = {n};
  return t;
}

void Tensor::zero_() {
  if (numel() == 0) return;
  op_profile::Scope profile("zero_fill", 0, device_ != Device::kCPU);
  if (device_ == Device::kCPU) {
    std::memset(data_, 0, nbytes());
  } else {
    backend(device_).fill_zero(data_, nbytes());
  }
}

void Tensor::copy_from(const Tensor& src) const {
  VT_CHECK_MSG(src.numel() == numel() && src.dtype() == dtype_,
               "copy_from " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " -> "
                            << shape_str(shape_) << " " << dtype_name(dtype_));
  if (numel() == 0 || src.raw() == data_) return;
  op_profile::Scope profile("tensor_copy", 0,
                            device_ != Device::kCPU || src.device() != Device::kCPU);
  const bool dst_host = device_ == Device::kCPU, src_host = src.device() == Device::kCPU;
  if (dst_host && src_host) {
    std::memcpy(data_, src.raw(), nbytes());
  } else if (dst_host) {
    backend(src.device()).copy_bytes(data_, src.raw(), nbytes(), CopyKind::kDeviceToHost);
  } else if (src_host) {
    backend(device_).copy_bytes(data_, src.raw(), nbytes(), CopyKind::kHostToDevice);
  } else {
    VT_CHECK_MSG(src.device() == device_, "copy between two different devices");
    backend(device_).copy_bytes(data_, src.raw(), nbytes(), CopyKind::kDeviceToDevice);
  }
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);  // copy_from writes every element
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);  // copy_from writes every element
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device, DType dtype) const {
  if (dtype == dtype_) return to(device);
  VT_CHECK_MSG((dtype_ == DType::kF32 || dtype_ == DType::kBF16) &&
                   (dtype == DType::kF32 || dtype == DType::kBF16),
               "no conversion " << dtype_name(dtype_) << " -> " << dtype_name(dtype));
  // Convert on the source device, then move (the conversion writes every element).
  Tensor conv = empty(shape_, dtype, device_);
  if (device_ == Device::kCPU) {
    const int64_t n = numel();
    if (dtype == DType::kBF16) {
      for (int64_t i = 0; i < n; ++i) conv.bf16()[i] = f32_to_bf16(f32()[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) conv.f32()[i] = bf16_to_f32(bf16()[i]);
    }
  } else {
    ops::detail::cast_on(backend(device_), conv, *this);
  }
  return conv.to(device);
}

std::vector<float> Tensor::to_host_f32() const {
  if (numel() == 0) return {};
  Tensor h = to(Device::kCPU);
  std::vector<float> out(numel());
  if (dtype_ == DType::kF32) {
    std::memcpy(out.data(), h.raw(), nbytes());
  } else if (dtype_ == DType::kBF16) {
    for (int64_t i = 0; i < numel(); ++i) out[i] = bf16_to_f32(h.bf16()[i]);
  } else {
    for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<float>(h.i32()[i]);
  }
  return out;
}

double Tensor::item(int64_t index) const {
  Tensor one = flat(index, 1).to(Device::kCPU);
  switch (dtype_) {
    case DType::kF32: return one.f32()[0];
    case DType::kBF16: return bf16_to_f32(one.bf16()[0]);
    case DType::kI32: return one.i32()[0];
  }
  return 0.0;
}

}  // namespace vt
