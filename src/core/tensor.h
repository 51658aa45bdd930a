// Tensor: a shape, a dtype (f32/bf16/i32), a device, and a pointer that either owns its memory
// (shared storage) or views memory owned elsewhere (an arena). Row-major, contiguous.
// Device memory comes from the device's Backend (core/backend.h); host code must not touch it:
// f32()/i32()/bf16() refuse device tensors, and data moves with to()/copy_from().
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace vt {

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled storage on `device` (through its backend for a device).
  static Tensor zeros(Shape shape, DType dtype = DType::kF32, Device device = Device::kCPU);
  // Allocates storage whose contents are unspecified (a device tensor skips the zero fill): only
  // for tensors written in full before anything reads them.
  static Tensor empty(Shape shape, DType dtype = DType::kF32, Device device = Device::kCPU);
  // A tensor of host values (f32 or i32) placed on `device`.
  static Tensor from_host(const float* data, Shape shape, Device device);
  static Tensor from_host(const int32_t* data, Shape shape, Device device);
  // Wraps memory owned elsewhere (no ownership taken).
  static Tensor view(void* data, Shape shape, DType dtype = DType::kF32, Device device = Device::kCPU);

  bool defined() const { return data_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return numel() * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  void* raw() const { return data_; }

  bool on_host() const { return device_ == Device::kCPU; }
  // Typed host pointers: fail for device tensors and for the wrong dtype.
  float* f32() const { check_host(DType::kF32); return static_cast<float*>(data_); }
  int32_t* i32() const { check_host(DType::kI32); return static_cast<int32_t*>(data_); }
  uint16_t* bf16() const { check_host(DType::kBF16); return static_cast<uint16_t*>(data_); }

  // Same memory, new shape (numel must match).
  Tensor reshaped(Shape shape) const;
  // Sets every element to zero.
  void zero_();
  // Deep copy into fresh storage on the same device.
  Tensor clone() const;
  // Copy on `device`, converted to `dtype` (f32 <-> bf16) when given.
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  // Copies src into this tensor (same numel and dtype; any pair of devices).
  void copy_from(const Tensor& src) const;
  // View of elements [offset, offset + n) of the flattened tensor, as a 1-D tensor.
  Tensor flat(int64_t offset, int64_t n) const;
  // Host copy of the values as fp32 (bf16 widened), for tests, logging and checkpoints.
  std::vector<float> to_host_f32() const;
  // One element as a double (synchronizes with the device).
  double item(int64_t index = 0) const;

 private:
  static Tensor make(Shape shape, DType dtype, Device device, bool zero);
  void check_host(DType want) const;

 public:

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCPU;
};

}  // namespace vt
