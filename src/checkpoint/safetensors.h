// The safetensors format (huggingface/safetensors, "Format"): an 8-byte little-endian header
// length N, N bytes of JSON {NAME: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}} (offsets relative to the byte after the header, tensors
// packed in order, no gaps), then the data, little-endian, row-major. The header is padded with
// spaces to a multiple of 8 bytes. Written whole into PATH.tmp, then renamed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vt {

struct SafeTensor {
  std::string name;
  std::string dtype;           // "F32", "BF16", "I32"
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel x element size bytes, little-endian
};

int64_t safetensors_element_bytes(const std::string& dtype);  // 0 for an unknown dtype

absl::Status write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace vt
