// A small Parquet writer for tests and fuzz seeds (never used by vtrain itself): a file with an
// INT64 column `id` and a string column (name, REQUIRED or OPTIONAL), written from the format's
// description (apache/parquet-format: parquet.thrift, Encodings.md) with a Thrift compact
// encoder of its own: row groups of `rows_per_group`, data pages of `rows_per_page` (v1 or v2),
// PLAIN or dictionary values (a dictionary page, then indices bit-packed), definition levels as
// RLE runs, pages UNCOMPRESSED, SNAPPY, GZIP or ZSTD, with CRCs optionally. The files pyarrow
// writes (tests/data/test_prepare_parquet.py) are the independent check; this one lets C++ tests
// and the fuzz target make exact files, and damaged ones, without Python.
#pragma once
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vt::test {

class ThriftWriter {
 public:
  std::string out;
  void begin() { last_.push_back(0); }              // a struct (after its field or list header)
  void end() { out += '\0'; last_.pop_back(); }      // STOP
  void field(int id, int type) {
    const int delta = id - last_.back();
    if (delta > 0 && delta <= 15) {
      out += static_cast<char>(delta << 4 | type);
    } else {
      out += static_cast<char>(type);
      varint(zigzag(id));
    }
    last_.back() = id;
  }
  void i32(int id, int64_t v) { field(id, 5); varint(zigzag(v)); }
  void i64(int id, int64_t v) { field(id, 6); varint(zigzag(v)); }
  void bin(int id, const std::string& s) { field(id, 8); str(s); }
  void boolean(int id, bool b) { field(id, b ? 1 : 2); }
  void list(int id, int elem_type, int64_t n) { field(id, 9); list_header(elem_type, n); }
  void list_header(int elem_type, int64_t n) {
    if (n < 15) {
      out += static_cast<char>(n << 4 | elem_type);
    } else {
      out += static_cast<char>(0xf0 | elem_type);
      varint(static_cast<uint64_t>(n));
    }
  }
  void struct_field(int id) { field(id, 12); begin(); }
  void str(const std::string& s) { varint(s.size()); out += s; }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out += static_cast<char>(v);
  }
  static uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }

 private:
  std::vector<int> last_;
};

struct ParquetWriteOptions {
  std::string column = "text";
  bool optional = false;
  bool dictionary = false;
  bool v2 = false;
  bool crc = false;
  int codec = 0;  // 0 none, 1 snappy, 2 gzip, 6 zstd
  int rows_per_page = 3;
  int rows_per_group = 7;
};

inline void put_le32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) *s += static_cast<char>(v >> (8 * i));
}

inline std::string compress_block(int codec, const std::string& in) {
  std::string out;
  if (codec == 0) return in;
  if (codec == 1) {
    size_t n = snappy_max_compressed_length(in.size());
    out.resize(n);
    snappy_compress(in.data(), in.size(), out.data(), &n);
    out.resize(n);
  } else if (codec == 6) {
    out.resize(ZSTD_compressBound(in.size()));
    out.resize(ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3));
  } else if (codec == 2) {
    z_stream zs{};
    deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    out.resize(deflateBound(&zs, in.size()) + 32);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
  }
  return out;
}

// RLE runs of equal values (bit width <= 8 here: definition levels).
inline std::string rle_runs(const std::vector<uint32_t>& v, int width) {
  ThriftWriter w;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    w.varint((j - i) << 1);
    for (int b = 0; b < (width + 7) / 8; ++b) w.out += static_cast<char>(v[i] >> (8 * b));
    i = j;
  }
  return w.out;
}

// One bit-packed run (groups of 8, least significant bit first).
inline std::string bit_packed(const std::vector<uint32_t>& v, int width) {
  ThriftWriter w;
  const size_t groups = (v.size() + 7) / 8;
  w.varint(groups << 1 | 1);
  std::string bits(groups * width, '\0');
  for (size_t i = 0; i < v.size(); ++i)
    for (int b = 0; b < width; ++b)
      if (v[i] >> b & 1) {
        const size_t at = i * width + b;
        bits[at / 8] = static_cast<char>(bits[at / 8] | (1 << (at % 8)));
      }
  return w.out + bits;
}

inline std::string plain(const std::string& s) {
  std::string out;
  put_le32(&out, static_cast<uint32_t>(s.size()));
  return out + s;
}

// A page: header (with crc when asked) + body.
inline std::string page(int type, int uncompressed, const std::string& body, const ParquetWriteOptions& o,
                        const std::function<void(ThriftWriter&)>& type_header) {
  ThriftWriter w;
  w.begin();
  w.i32(1, type);
  w.i32(2, uncompressed);
  w.i32(3, static_cast<int64_t>(body.size()));
  if (o.crc) w.i32(4, static_cast<int32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
  type_header(w);
  w.end();
  return w.out + body;
}

// The file's bytes: ids 0..n-1 and `values` (nullopt: null) in the string column.
inline std::string write_parquet(const std::vector<std::optional<std::string>>& values,
                                 const ParquetWriteOptions& o) {
  std::string file = "PAR1";
  struct Chunk { int64_t start, size, dict_offset, data_offset, rows; };
  std::vector<std::pair<Chunk, Chunk>> groups;  // (id, text)
  const int64_t n = static_cast<int64_t>(values.size());
  for (int64_t g0 = 0; g0 < n; g0 += o.rows_per_group) {
    const int64_t g1 = std::min<int64_t>(n, g0 + o.rows_per_group);
    // The id column: one PLAIN uncompressed v1 page.
    Chunk id{static_cast<int64_t>(file.size()), 0, -1, static_cast<int64_t>(file.size()), g1 - g0};
    std::string ids;
    for (int64_t r = g0; r < g1; ++r)
      for (int b = 0; b < 8; ++b) ids += static_cast<char>(static_cast<uint64_t>(r) >> (8 * b));
    ParquetWriteOptions plain_opts;
    file += page(0, static_cast<int>(ids.size()), ids, plain_opts, [&](ThriftWriter& w) {
      w.struct_field(5);
      w.i32(1, g1 - g0);
      w.i32(2, 0);
      w.i32(3, 3);
      w.i32(4, 3);
      w.end();
    });
    id.size = static_cast<int64_t>(file.size()) - id.start;
    // The text column.
    Chunk tx{static_cast<int64_t>(file.size()), 0, -1, -1, g1 - g0};
    std::map<std::string, uint32_t> dict;
    std::vector<std::string> dict_order;
    if (o.dictionary) {
      for (int64_t r = g0; r < g1; ++r)
        if (values[r] && dict.emplace(*values[r], static_cast<uint32_t>(dict_order.size())).second)
          dict_order.push_back(*values[r]);
      std::string body;
      for (const std::string& s : dict_order) body += plain(s);
      tx.dict_offset = static_cast<int64_t>(file.size());
      file += page(2, static_cast<int>(body.size()), compress_block(o.codec, body), o, [&](ThriftWriter& w) {
        w.struct_field(7);
        w.i32(1, static_cast<int64_t>(dict_order.size()));
        w.i32(2, 0);
        w.end();
      });
    }
    tx.data_offset = static_cast<int64_t>(file.size());
    int width = 0;
    while ((uint64_t{1} << width) < dict_order.size()) ++width;
    for (int64_t p0 = g0; p0 < g1; p0 += o.rows_per_page) {
      const int64_t p1 = std::min<int64_t>(g1, p0 + o.rows_per_page);
      std::vector<uint32_t> levels, indices;
      std::string vals;
      int nulls = 0;
      for (int64_t r = p0; r < p1; ++r) {
        levels.push_back(values[r] ? 1 : 0);
        if (!values[r]) {
          ++nulls;
          continue;
        }
        if (o.dictionary) {
          indices.push_back(dict[*values[r]]);
        } else {
          vals += plain(*values[r]);
        }
      }
      if (o.dictionary) vals = std::string(1, static_cast<char>(width)) + bit_packed(indices, width);
      const std::string defs = o.optional ? rle_runs(levels, 1) : "";
      const int encoding = o.dictionary ? 8 : 0;
      if (!o.v2) {
        std::string body;
        if (o.optional) {
          put_le32(&body, static_cast<uint32_t>(defs.size()));
          body += defs;
        }
        body += vals;
        file += page(0, static_cast<int>(body.size()), compress_block(o.codec, body), o, [&](ThriftWriter& w) {
          w.struct_field(5);
          w.i32(1, p1 - p0);
          w.i32(2, encoding);
          w.i32(3, 3);
          w.i32(4, 3);
          w.end();
        });
      } else {
        const std::string body = defs + compress_block(o.codec, vals);
        file += page(3, static_cast<int>(defs.size() + vals.size()), body, o, [&](ThriftWriter& w) {
          w.struct_field(8);
          w.i32(1, p1 - p0);
          w.i32(2, nulls);
          w.i32(3, p1 - p0);
          w.i32(4, encoding);
          w.i32(5, static_cast<int64_t>(defs.size()));
          w.i32(6, 0);
          w.end();
        });
      }
    }
    tx.size = static_cast<int64_t>(file.size()) - tx.start;
    groups.push_back({id, tx});
  }
  ThriftWriter f;
  f.begin();
  f.i32(1, 1);
  f.list(2, 12, 3);
  f.begin();
  f.bin(4, "schema");
  f.i32(5, 2);
  f.end();
  f.begin();
  f.i32(1, 2);  // INT64
  f.i32(3, 0);
  f.bin(4, "id");
  f.end();
  f.begin();
  f.i32(1, 6);  // BYTE_ARRAY
  f.i32(3, o.optional ? 1 : 0);
  f.bin(4, o.column);
  f.i32(6, 0);  // UTF8
  f.struct_field(10);
  f.struct_field(1);  // LogicalType.STRING
  f.end();
  f.end();
  f.end();
  f.i64(3, n);
  f.list(4, 12, static_cast<int64_t>(groups.size()));
  for (const auto& [id, tx] : groups) {
    f.begin();
    f.list(1, 12, 2);
    int which = 0;
    for (const Chunk& c : {id, tx}) {
      const bool is_text = which++ == 1;
      f.begin();
      f.i64(2, 0);
      f.struct_field(3);
      f.i32(1, is_text ? 6 : 2);
      f.list(2, 5, 1);
      f.varint(ThriftWriter::zigzag(is_text && o.dictionary ? 8 : 0));
      f.list(3, 8, 1);
      f.str(is_text ? o.column : "id");
      f.i32(4, is_text ? o.codec : 0);
      f.i64(5, c.rows);
      f.i64(6, c.size);
      f.i64(7, c.size);
      f.i64(9, c.data_offset);
      if (c.dict_offset >= 0) f.i64(11, c.dict_offset);
      f.end();
      f.end();
    }
    f.i64(2, id.size + tx.size);
    f.i64(3, id.rows);
    f.end();
  }
  f.end();
  file += f.out;
  put_le32(&file, static_cast<uint32_t>(f.out.size()));
  return file + "PAR1";
}

}  // namespace vt::test
