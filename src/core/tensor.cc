// Tensor storage, shapes and small utilities.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace vt {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + ")";
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  VT_CHECK_MSG(device == Device::kCPU, "Tensor::zeros only allocates CPU memory");
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  size_t bytes = t.nbytes();
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  VT_CHECK_MSG(p != nullptr, "out of memory allocating " << bytes << " bytes");
  std::memset(p, 0, alloc);
  t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::view(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  VT_CHECK_MSG(shape_numel(shape) == numel(), "reshape " << shape_str(shape_) << " -> " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::zero_() {
  VT_CHECK(device_ == Device::kCPU);
  if (numel() > 0) std::memset(data_, 0, nbytes());
}

Tensor Tensor::clone() const {
  VT_CHECK(device_ == Device::kCPU);
  Tensor t = zeros(shape_, dtype_, device_);
  if (numel() > 0) std::memcpy(t.data_, data_, nbytes());
  return t;
}

}  // namespace vt
