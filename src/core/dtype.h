// The element types, devices and shapes every tensor has (core/tensor.h), apart from Tensor so
// the backend interface (core/backend.h) can name a device without the tensor that uses it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vt {

enum class DType : uint8_t { kF32, kBF16, kI32 };
enum class Device : uint8_t { kCPU, kCUDA };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

}  // namespace vt
