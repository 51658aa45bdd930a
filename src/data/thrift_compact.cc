// ThriftCompactReader (see thrift_compact.h): field headers with delta-coded ids, zigzag
// varints, length-prefixed binaries, list and map headers, and a depth-bounded skip.
#include "data/thrift_compact.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace vt::data {
namespace {

bool valid_type(uint8_t t) { return t >= 1 && t <= 12; }

int64_t unzigzag(uint64_t n) { return static_cast<int64_t>(n >> 1) ^ -static_cast<int64_t>(n & 1); }

}  // namespace

void ThriftCompactReader::fail(const std::string& why) {
  if (error_.empty()) error_ = absl::StrCat(why, " (Thrift byte ", position(), ")");
  p_ = end_;
}

uint8_t ThriftCompactReader::byte() {
  if (!ok()) return 0;
  if (p_ >= end_) {
    truncated_ = true;
    fail("the metadata ends inside a value");
    return 0;
  }
  return *p_++;
}

uint64_t ThriftCompactReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    const uint8_t b = byte();
    if (!ok()) return 0;
    if (shift == 63 && b > 1) break;  // more than 64 bits
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail("a varint longer than 64 bits");
  return 0;
}

void ThriftCompactReader::begin_struct() {
  if (static_cast<int>(last_id_.size()) >= kMaxDepth) {
    fail(absl::StrCat("structs nested deeper than ", kMaxDepth));
    return;
  }
  last_id_.push_back(0);
}

void ThriftCompactReader::end_struct() {
  if (!last_id_.empty()) last_id_.pop_back();
}

bool ThriftCompactReader::next_field(int16_t* id, ThriftType* type) {
  if (!ok() || last_id_.empty()) return false;
  const uint8_t b = byte();
  if (!ok() || b == 0) return false;
  const uint8_t t = b & 0x0f;
  if (!valid_type(t)) {
    fail(absl::StrCat("unknown field type ", static_cast<int>(t)));
    return false;
  }
  const int delta = b >> 4;
  int64_t fid = 0;
  if (delta != 0) {
    fid = static_cast<int64_t>(last_id_.back()) + delta;
  } else {
    fid = unzigzag(varint());
    if (!ok()) return false;
  }
  if (fid < std::numeric_limits<int16_t>::min() || fid > std::numeric_limits<int16_t>::max()) {
    fail(absl::StrCat("field id ", fid, " out of range"));
    return false;
  }
  last_id_.back() = static_cast<int16_t>(fid);
  *id = static_cast<int16_t>(fid);
  *type = static_cast<ThriftType>(t);
  return true;
}

int64_t ThriftCompactReader::read_int(ThriftType type) {
  switch (type) {
    case ThriftType::kByte: return static_cast<int8_t>(byte());
    case ThriftType::kI16:
    case ThriftType::kI32:
    case ThriftType::kI64: return unzigzag(varint());
    default:
      fail(absl::StrCat("an integer field has type ", static_cast<int>(type)));
      return 0;
  }
}

int32_t ThriftCompactReader::read_i32(ThriftType type) {
  const int64_t v = read_int(type);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    fail(absl::StrCat("the 32-bit field holds ", v));
    return 0;
  }
  return static_cast<int32_t>(v);
}

std::string_view ThriftCompactReader::read_binary() {
  const uint64_t n = varint();
  if (!ok()) return {};
  if (n > static_cast<uint64_t>(end_ - p_)) {
    truncated_ = true;
    fail(absl::StrCat("a string of ", n, " bytes runs past the end of the metadata"));
    return {};
  }
  std::string_view v(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
  p_ += n;
  return v;
}

bool ThriftCompactReader::read_list_header(ThriftType* elem, int64_t* count) {
  const uint8_t b = byte();
  if (!ok()) return false;
  uint64_t n = b >> 4;
  if (n == 15) n = varint();
  const uint8_t t = b & 0x0f;
  if (!ok()) return false;
  if (!valid_type(t)) {
    fail(absl::StrCat("unknown list element type ", static_cast<int>(t)));
    return false;
  }
  if (n > static_cast<uint64_t>(end_ - p_)) {  // every element takes at least one byte
    truncated_ = true;
    fail(absl::StrCat("a list of ", n, " elements is longer than the metadata left"));
    return false;
  }
  *elem = static_cast<ThriftType>(t);
  *count = static_cast<int64_t>(n);
  return true;
}

void ThriftCompactReader::skip(ThriftType type) { skip_depth(type, static_cast<int>(last_id_.size())); }

void ThriftCompactReader::skip_depth(ThriftType type, int depth) {
  if (!ok()) return;
  if (depth >= kMaxDepth) {
    fail(absl::StrCat("values nested deeper than ", kMaxDepth));
    return;
  }
  switch (type) {
    case ThriftType::kTrue:
    case ThriftType::kFalse: return;  // a bool field's value is its type
    case ThriftType::kByte: byte(); return;
    case ThriftType::kI16:
    case ThriftType::kI32:
    case ThriftType::kI64: varint(); return;
    case ThriftType::kDouble:
      for (int i = 0; i < 8; ++i) byte();
      return;
    case ThriftType::kBinary: read_binary(); return;
    case ThriftType::kList:
    case ThriftType::kSet: {
      ThriftType elem;
      int64_t n = 0;
      if (!read_list_header(&elem, &n)) return;
      for (int64_t i = 0; i < n && ok(); ++i) {
        if (elem == ThriftType::kTrue || elem == ThriftType::kFalse) {
          byte();  // a bool element is one byte
        } else {
          skip_depth(elem, depth + 1);
        }
      }
      return;
    }
    case ThriftType::kMap: {
      const uint64_t n = varint();
      if (!ok() || n == 0) return;
      const uint8_t kv = byte();
      if (!ok()) return;
      const uint8_t kt = kv >> 4, vt = kv & 0x0f;
      if (!valid_type(kt) || !valid_type(vt)) {
        fail("unknown map key or value type");
        return;
      }
      if (n > static_cast<uint64_t>(end_ - p_)) {
        truncated_ = true;
        fail(absl::StrCat("a map of ", n, " entries is longer than the metadata left"));
        return;
      }
      for (uint64_t i = 0; i < n && ok(); ++i) {
        for (uint8_t t : {kt, vt}) {
          if (t == 1 || t == 2) {
            byte();
          } else {
            skip_depth(static_cast<ThriftType>(t), depth + 1);
          }
        }
      }
      return;
    }
    case ThriftType::kStruct: {
      const size_t open = last_id_.size();
      begin_struct();
      if (!ok()) return;
      int16_t id;
      ThriftType t;
      while (next_field(&id, &t)) skip_depth(t, depth + 1);
      if (last_id_.size() > open) end_struct();
      return;
    }
    default: fail(absl::StrCat("cannot skip a value of type ", static_cast<int>(type)));
  }
}

}  // namespace vt::data
