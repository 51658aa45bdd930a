// RLE / bit-packed hybrid and PLAIN byte-array decoding (see parquet_encoding.h).
#include "data/parquet_encoding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vt::data::parquet {

bool RleBitPackedDecoder::fail(const std::string& why) {
  if (error_.empty()) error_ = why;
  p_ = end_;
  rle_left_ = packed_left_ = 0;
  return false;
}

bool RleBitPackedDecoder::next(uint32_t* value) {
  if (!error_.empty()) return false;
  if (width_ < 0 || width_ > 32) return fail(absl::StrCat("bit width ", width_, " is over 32"));
  for (;;) {
    if (rle_left_ > 0) {
      --rle_left_;
      *value = rle_value_;
      return true;
    }
    if (packed_left_ > 0) {
      --packed_left_;
      uint64_t v = 0;
      for (int got = 0; got < width_;) {  // gather width_ bits starting at bit_
        const uint64_t byte = bit_ / 8;
        const int shift = static_cast<int>(bit_ % 8);
        const int take = std::min(8 - shift, width_ - got);
        if (byte >= packed_bytes_) return fail("a bit-packed run ends early");  // not reached
        v |= static_cast<uint64_t>((packed_[byte] >> shift) & ((1u << take) - 1)) << got;
        got += take;
        bit_ += static_cast<uint64_t>(take);
      }
      *value = static_cast<uint32_t>(v);
      return true;
    }
    if (p_ >= end_) return fail("the levels or indices end early");
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      if (p_ >= end_) return fail("a run header is cut off");
      if (shift > 28) return fail("a run header longer than 32 bits");
      const uint8_t b = *p_++;
      header |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    if (header & 1) {  // bit-packed: (header >> 1) groups of 8 values
      const uint64_t values = (header >> 1) * 8;
      const uint64_t bytes = (header >> 1) * static_cast<uint64_t>(width_);
      const uint64_t have = std::min<uint64_t>(bytes, static_cast<uint64_t>(end_ - p_));
      packed_ = p_;
      packed_bytes_ = have;
      packed_left_ = width_ == 0 ? values : std::min<uint64_t>(values, have * 8 / width_);
      bit_ = 0;
      p_ += have;
    } else {  // a run of one value
      const int nbytes = (width_ + 7) / 8;
      if (end_ - p_ < nbytes) return fail("a run's value is cut off");
      uint64_t v = 0;
      for (int i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
      p_ += nbytes;
      if (width_ < 32 && (v >> width_) != 0)
        return fail(absl::StrCat("a run's value ", v, " does not fit ", width_, " bits"));
      rle_value_ = static_cast<uint32_t>(v);
      rle_left_ = header >> 1;
    }
  }
}

bool PlainByteArrays::next(std::string_view* value) {
  if (!error_.empty()) return false;
  if (end_ - p_ < 4) {
    error_ = p_ == end_ ? "the values end early" : "a value's length is cut off";
    p_ = end_;
    return false;
  }
  const uint32_t n = static_cast<uint32_t>(p_[0]) | static_cast<uint32_t>(p_[1]) << 8 |
                     static_cast<uint32_t>(p_[2]) << 16 | static_cast<uint32_t>(p_[3]) << 24;
  p_ += 4;
  if (n > static_cast<uint32_t>(end_ - p_)) {
    error_ = absl::StrCat("a value of ", n, " bytes runs past the page's ", end_ - p_, " bytes left");
    p_ = end_;
    return false;
  }
  *value = std::string_view(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return true;
}

}  // namespace vt::data::parquet
