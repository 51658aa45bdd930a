// The value encodings of a Parquet BYTE_ARRAY column that the text reader decodes, from a page's
// (decompressed) bytes:
//   RleBitPackedDecoder: the RLE / bit-packed hybrid of definition levels and of dictionary
//     indices (Encodings.md): runs of <varint header><value in ceil(w/8) bytes, little endian>
//     (header = count << 1) and bit-packed runs of groups of 8 values, w bits each, least
//     significant bit first (header = groups << 1 | 1).
//   PlainByteArrays: PLAIN BYTE_ARRAY values, each a 4-byte little-endian length and its bytes
//     (data pages and dictionary pages alike).
// Both only read inside the span they are given; a run or value that would reach past it is an
// error (a bit-packed run cut short at the end of the span gives the values it holds, as other
// readers do), and a failed decoder stays failed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vt::data::parquet {

class RleBitPackedDecoder {
 public:
  RleBitPackedDecoder() = default;
  // bit_width 0..32 (0: every value is 0).
  RleBitPackedDecoder(const uint8_t* data, size_t size, int bit_width)
      : p_(data), end_(data + size), width_(bit_width) {}
  // The next value; false when the data runs out or is malformed (error() says which).
  bool next(uint32_t* value);
  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& why);
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  int width_ = 0;
  uint64_t rle_left_ = 0;
  uint32_t rle_value_ = 0;
  uint64_t packed_left_ = 0;      // values left in the current bit-packed run
  const uint8_t* packed_ = nullptr;
  uint64_t packed_bytes_ = 0;     // bytes of the run present in the span
  uint64_t bit_ = 0;              // next value's bit offset in the run
  std::string error_;
};

class PlainByteArrays {
 public:
  PlainByteArrays() = default;
  PlainByteArrays(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  // The next value (a view into the span); false when the span ends or a length reaches past it.
  bool next(std::string_view* value);
  const std::string& error() const { return error_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  std::string error_;
};

}  // namespace vt::data::parquet
