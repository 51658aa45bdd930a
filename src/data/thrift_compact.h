// ThriftCompactReader: a reader of Apache Thrift's compact protocol over a byte span, enough to
// decode Parquet's footer (FileMetaData) and page headers by hand (data/parquet_meta.h) without
// libthrift. The caller walks structs field by field (next_field), reads the values it knows and
// skip()s the rest, as generated Thrift code does.
// Hostile bytes: every read is bounded by the span; varints longer than 10 bytes, nesting deeper
// than kMaxDepth and list sizes larger than the bytes left (each element takes at least one byte)
// are errors. Errors are sticky: after the first one every read returns zero/empty and
// next_field() returns false, so decoding loops end; ok() and error() tell what happened, and
// truncated() whether the span ended early (more bytes might complete it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vt::data {

// The compact protocol's type codes (as a field header's low nibble or a list's element type).
enum class ThriftType : uint8_t {
  kStop = 0, kTrue = 1, kFalse = 2, kByte = 3, kI16 = 4, kI32 = 5, kI64 = 6, kDouble = 7,
  kBinary = 8, kList = 9, kSet = 10, kMap = 11, kStruct = 12,
};

class ThriftCompactReader {
 public:
  static constexpr int kMaxDepth = 64;

  ThriftCompactReader(const uint8_t* data, size_t size) : p_(data), begin_(data), end_(data + size) {}

  // Enters a struct (the outermost one too): its field ids are deltas from 0 again.
  void begin_struct();
  // Leaves the struct entered last (after next_field() returned false at its STOP).
  void end_struct();
  // The next field of the current struct; false at its STOP or after an error.
  bool next_field(int16_t* id, ThriftType* type);

  // Values. An integer field of any width (i8, i16, i32, i64) reads as int64; a field of another
  // type is an error. A bool field's value is in its type (kTrue/kFalse).
  int64_t read_int(ThriftType type);
  int32_t read_i32(ThriftType type);  // read_int, and an error when it does not fit 32 bits
  std::string_view read_binary();     // a view into the span
  // A list's (or set's) header: the element type and count (at most the bytes left).
  bool read_list_header(ThriftType* elem, int64_t* count);
  // Skips one value of `type` (structs, lists and maps recursively).
  void skip(ThriftType type);

  bool ok() const { return error_.empty(); }
  bool truncated() const { return truncated_; }
  const std::string& error() const { return error_; }
  size_t position() const { return static_cast<size_t>(p_ - begin_); }
  void fail(const std::string& why);

 private:
  uint64_t varint();
  uint8_t byte();
  void skip_depth(ThriftType type, int depth);

  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  std::vector<int16_t> last_id_;  // per open struct: the last field id read
  std::string error_;
  bool truncated_ = false;
};

}  // namespace vt::data
