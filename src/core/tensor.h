// Tensor: a shape, a dtype (f32/bf16/i32), a device, and a pointer that either owns its memory
// (shared storage) or views memory owned elsewhere (an arena). Row-major, contiguous.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"

namespace vt {

enum class DType : uint8_t { kF32, kBF16, kI32 };
enum class Device : uint8_t { kCPU, kCUDA };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled storage on the CPU.
  static Tensor zeros(Shape shape, DType dtype = DType::kF32, Device device = Device::kCPU);
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

  float* f32() const { VT_CHECK(dtype_ == DType::kF32); return static_cast<float*>(data_); }
  int32_t* i32() const { VT_CHECK(dtype_ == DType::kI32); return static_cast<int32_t*>(data_); }

  // Same memory, new shape (numel must match).
  Tensor reshaped(Shape shape) const;
  // Sets every element to zero.
  void zero_();
  // Deep copy into fresh CPU storage.
  Tensor clone() const;

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCPU;
};

}  // namespace vt
