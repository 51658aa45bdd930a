// ParquetTextReader (see parquet_reader.h): the footer and its checks, the chosen column's
// chunks in row-group order, and the pages of a chunk decoded one at a time.
#include "data/parquet_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "data/parquet_codec.h"

namespace vt::data {
namespace {

using namespace parquet;

constexpr size_t kFirstHeaderRead = 256;  // page headers are usually far smaller

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

uint8_t* ParquetTextReader::Buffer::reserve(size_t n) {
  if (n > capacity || !bytes) {
    bytes.reset(new uint8_t[n > 0 ? n : 1]);
    capacity = n;
  }
  return bytes.get();
}

ParquetTextReader::~ParquetTextReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ParquetTextReader::read_at(int64_t offset, size_t n, uint8_t* out) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return absl::DataLossError(absl::StrCat("reading ", path_, " failed: ", std::strerror(errno)));
    if (r == 0)
      return absl::DataLossError(absl::StrCat(path_, ": the file ended at byte ", offset + done,
                                              " while reading (it changed while being read?)"));
    done += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status ParquetTextReader::damaged(const std::string& why) const {
  return absl::DataLossError(absl::StrCat(path_, ": row group ", rg_ + 1, " of ", meta_.chunks.size(),
                                          ": ", why));
}

std::string ParquetTextReader::where() const {
  return absl::StrCat(path_, ": row ", row_, " (row group ", rg_ + 1, " of ", meta_.chunks.size(), ")");
}

absl::StatusOr<std::unique_ptr<ParquetTextReader>> ParquetTextReader::open(
    const std::string& path, const std::string& column, int64_t max_page_bytes) {
  std::unique_ptr<ParquetTextReader> r(new ParquetTextReader());
  r->path_ = path;
  r->max_page_bytes_ = max_page_bytes;
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd_ < 0)
    return absl::NotFoundError(absl::StrCat("cannot open input ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(r->fd_, &st) != 0) return absl::InternalError(absl::StrCat("cannot stat ", path));
  const int64_t size = st.st_size;
  if (size < 12)
    return absl::DataLossError(absl::StrCat(path, ": not a Parquet file (", size,
                                            " bytes; the smallest Parquet file has 12)"));
  uint8_t head[4], tail[8];
  VT_RETURN_IF_ERROR(r->read_at(0, 4, head));
  VT_RETURN_IF_ERROR(r->read_at(size - 8, 8, tail));
  if (std::memcmp(head, "PAR1", 4) != 0) {
    if (std::memcmp(head, "PARE", 4) == 0)
      return absl::UnimplementedError(absl::StrCat(path, ": an encrypted Parquet file (magic PARE); "
                                                   "encryption is not supported"));
    if ((head[0] == 0x1f && head[1] == 0x8b) || std::memcmp(head, "\x28\xb5\x2f\xfd", 4) == 0)
      return absl::DataLossError(absl::StrCat(path, ": a compressed file, not a Parquet file (Parquet "
                                              "compresses its pages itself; decompress the file)"));
    return absl::DataLossError(absl::StrCat(path, ": not a Parquet file (it does not start with the "
                                            "magic bytes PAR1)"));
  }
  if (std::memcmp(tail + 4, "PAR1", 4) != 0)
    return absl::DataLossError(absl::StrCat(path, ": truncated Parquet file (it does not end with the "
                                            "magic bytes PAR1 that close the footer; was the "
                                            "download cut short?)"));
  const int64_t footer_len = le32(tail);
  const int64_t footer_start = size - 8 - footer_len;
  if (footer_len == 0 || footer_start < 4)
    return absl::DataLossError(absl::StrCat(path, ": corrupt footer length (", footer_len,
                                            " bytes of metadata in a file of ", size, " bytes)"));
  if (footer_len > kMaxFooterBytes)
    return absl::ResourceExhaustedError(absl::StrCat(path, ": a footer of ", footer_len,
                                                     " bytes is over the ", kMaxFooterBytes,
                                                     " this reader holds"));
  {
    std::vector<uint8_t> footer(static_cast<size_t>(footer_len));
    VT_RETURN_IF_ERROR(r->read_at(footer_start, footer.size(), footer.data()));
    auto meta = decode_file_meta(footer.data(), footer.size(), column);
    if (!meta.ok())
      return absl::Status(meta.status().code(), absl::StrCat(path, ": ", meta.status().message()));
    r->meta_ = std::move(*meta);
  }
  const FileMeta& m = r->meta_;
  if (m.encrypted)
    return absl::UnimplementedError(absl::StrCat(path, ": an encrypted Parquet file; encryption is not supported"));
  const ColumnSchema& c = m.column;
  const std::string name = absl::StrCat("column \"", column, "\"");
  const char* choose = "; choose the column with --text-field";
  if (!c.found)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no top-level ", name, " (the file's columns: ", absl::StrJoin(c.top_level_names, ", "),
        c.top_level_names.size() >= 32 ? ", ..." : "", ")", choose));
  if (c.physical_type < 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " is a group (a struct, list or "
                                                   "map), not a string column", choose));
  if (c.repetition == kRepeated)
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " is repeated (several values "
                                                   "per row), not a string column", choose));
  if (c.repetition != kRequired && c.repetition != kOptional)
    return absl::DataLossError(absl::StrCat(path, ": corrupt schema: ", name, " has repetition type ",
                                            c.repetition));
  if (c.physical_type != kByteArray)
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " holds ",
                                                   physical_type_name(c.physical_type),
                                                   " values, not strings", choose));
  if (c.converted_type != kUtf8 && c.logical_type != kLogicalString)
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " is binary (BYTE_ARRAY without "
                                                   "the STRING/UTF8 annotation), not a string column",
                                                   choose));
  r->max_def_ = c.repetition == kOptional ? 1 : 0;
  VT_RETURN_IF_ERROR(r->check_chunks(footer_start));
  if (!r->meta_.chunks.empty()) VT_RETURN_IF_ERROR(r->start_chunk(0));
  return r;
}

absl::Status ParquetTextReader::check_chunks(int64_t footer_start) {
  for (rg_ = 0; rg_ < meta_.chunks.size(); ++rg_) {
    const ColumnChunk& k = meta_.chunks[rg_];
    if (k.encrypted)
      return absl::UnimplementedError(absl::StrCat(path_, ": the text column is encrypted; "
                                                   "encryption is not supported"));
    if (k.external)
      return absl::UnimplementedError(absl::StrCat(path_, ": the text column's data is in another "
                                                   "file (ColumnChunk.file_path); not supported"));
    if (!k.has_meta) return damaged("the column chunk has no metadata");
    if (!k.path_matches) return damaged("the column chunk's path is not the column's");
    if (k.physical_type != kByteArray)
      return damaged(absl::StrCat("the column chunk holds ", physical_type_name(k.physical_type),
                                  " where the schema says BYTE_ARRAY"));
    if (!codec_supported(k.codec))
      return absl::UnimplementedError(absl::StrCat(
          path_, ": the text column is compressed with ", codec_name(k.codec),
          ", which this reader does not decompress (it reads UNCOMPRESSED, SNAPPY, GZIP and ZSTD; "
          "rewrite the file, e.g. pyarrow.parquet.write_table(..., compression='zstd'))"));
    if (k.num_values != k.num_rows)
      return damaged(absl::StrCat("the column chunk holds ", k.num_values, " values for the row "
                                  "group's ", k.num_rows, " rows"));
    int64_t start = k.data_page_offset;
    if (k.dictionary_page_offset > 0 && k.dictionary_page_offset < start) start = k.dictionary_page_offset;
    if (start < 4 || k.total_compressed_size > footer_start - start)
      return damaged(absl::StrCat("the column chunk's bytes [", start, ", +", k.total_compressed_size,
                                  ") lie outside the file's data (bytes 4 to ", footer_start, ")"));
  }
  rg_ = 0;
  return absl::OkStatus();
}

absl::Status ParquetTextReader::start_chunk(size_t rg) {
  rg_ = rg;
  const ColumnChunk& k = meta_.chunks[rg];
  pos_ = k.data_page_offset;
  if (k.dictionary_page_offset > 0 && k.dictionary_page_offset < pos_) pos_ = k.dictionary_page_offset;
  end_ = pos_ + k.total_compressed_size;
  chunk_values_left_ = k.num_values;
  data_page_seen_ = false;
  have_dict_ = false;
  dict_.clear();
  page_left_ = 0;
  return absl::OkStatus();
}

absl::Status ParquetTextReader::setup_values(int32_t encoding, const uint8_t* data, size_t n) {
  if (encoding == kPlain) {
    dict_mode_ = false;
    plain_ = PlainByteArrays(data, n);
    return absl::OkStatus();
  }
  if (encoding == kPlainDictionary || encoding == kRleDictionary) {
    if (!have_dict_) return damaged("a dictionary-encoded data page, but the chunk has no dictionary page");
    dict_mode_ = true;
    if (n == 0) {  // no non-null values: an index asked for is an error
      indices_ = RleBitPackedDecoder(data, 0, 0);
      return absl::OkStatus();
    }
    if (data[0] > 32) return damaged(absl::StrCat("dictionary indices of bit width ", data[0]));
    indices_ = RleBitPackedDecoder(data + 1, n - 1, data[0]);
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      path_, ": row group ", rg_ + 1, ": the text column uses the ", encoding_name(encoding),
      " encoding, which this reader does not decode (it reads PLAIN and dictionary encodings; "
      "rewrite the file, e.g. with pyarrow's defaults)"));
}

absl::Status ParquetTextReader::load_page() {
  if (pos_ >= end_)
    return damaged(absl::StrCat("the column chunk ends with ", chunk_values_left_, " of its ",
                                meta_.chunks[rg_].num_values, " values still to come"));
  // The header: read a little, more while it is cut off (up to the chunk's end).
  PageHeader h;
  size_t header_len = 0;
  const int64_t left = end_ - pos_;
  size_t want = static_cast<size_t>(std::min<int64_t>(left, kFirstHeaderRead));
  for (;;) {
    uint8_t* buf = header_buf_.reserve(want);
    VT_RETURN_IF_ERROR(read_at(pos_, want, buf));
    bool truncated = false;
    auto got = decode_page_header(buf, want, &h, &truncated);
    if (got.ok()) {
      header_len = *got;
      break;
    }
    const int64_t cap = std::min<int64_t>(left, max_page_bytes_);
    if (!truncated || static_cast<int64_t>(want) >= cap)
      return damaged(absl::StrCat("at byte ", pos_, ": ", got.status().message()));
    want = static_cast<size_t>(std::min<int64_t>(cap, static_cast<int64_t>(want) * 8));
  }
  const int64_t body = pos_ + static_cast<int64_t>(header_len);
  if (h.compressed_size > end_ - body)
    return damaged(absl::StrCat("a page at byte ", pos_, " of ", h.compressed_size,
                                " bytes runs past the column chunk's end"));
  pos_ = body + h.compressed_size;
  if (h.type != kDataPage && h.type != kDataPageV2 && h.type != kDictionaryPage)
    return absl::OkStatus();  // an index page, or a kind this reader does not use
  if (!h.has_type_header) return damaged(absl::StrCat("the page at byte ", body - header_len,
                                                      " lacks its data or dictionary page header"));
  if (h.compressed_size > max_page_bytes_ || h.uncompressed_size > max_page_bytes_)
    return absl::ResourceExhaustedError(absl::StrCat(
        path_, ": row group ", rg_ + 1, ": a page of ", std::max(h.compressed_size, h.uncompressed_size),
        " bytes is larger than the ", max_page_bytes_, " bytes this reader holds (--max-document-bytes "
        "plus 16 MiB); raise --max-document-bytes"));
  uint8_t* raw = raw_buf_.reserve(static_cast<size_t>(h.compressed_size));
  VT_RETURN_IF_ERROR(read_at(body, static_cast<size_t>(h.compressed_size), raw));
  if (h.has_crc) {
    const uint32_t crc = static_cast<uint32_t>(
        crc32(crc32(0L, Z_NULL, 0), raw, static_cast<uInt>(h.compressed_size)));
    if (crc != h.crc) return damaged(absl::StrCat("the page at byte ", body - header_len,
                                                  " fails its CRC check"));
  }
  const int32_t codec = meta_.chunks[rg_].codec;
  auto decompress = [&](const uint8_t* src, size_t n, size_t out_size, Buffer* into,
                        const uint8_t** out) -> absl::Status {
    if (codec == kUncompressed) {
      if (n != out_size)
        return damaged(absl::StrCat("an uncompressed page holds ", n, " bytes where its header says ", out_size));
      *out = src;
      return absl::OkStatus();
    }
    uint8_t* dst = into->reserve(out_size);
    absl::Status st = decompress_page(codec, src, n, dst, out_size);
    if (!st.ok()) {
      if (st.code() != absl::StatusCode::kDataLoss) return st;
      return damaged(std::string(st.message()));
    }
    *out = dst;
    return absl::OkStatus();
  };

  if (h.type == kDictionaryPage) {
    if (have_dict_ || data_page_seen_) return damaged("a second dictionary page, or one after data pages");
    if (h.encoding != kPlain && h.encoding != kPlainDictionary)
      return damaged(absl::StrCat("a dictionary page in the ", encoding_name(h.encoding), " encoding"));
    const uint8_t* data = nullptr;
    // The dictionary outlives this page: decompressed into its own buffer (copied if plain).
    if (codec == kUncompressed) {
      if (h.compressed_size != h.uncompressed_size)
        return damaged("an uncompressed dictionary page whose two sizes differ");
      uint8_t* dst = dict_buf_.reserve(static_cast<size_t>(h.uncompressed_size));
      std::memcpy(dst, raw, static_cast<size_t>(h.uncompressed_size));
      data = dst;
    } else {
      VT_RETURN_IF_ERROR(decompress(raw, static_cast<size_t>(h.compressed_size),
                                    static_cast<size_t>(h.uncompressed_size), &dict_buf_, &data));
    }
    if (h.num_values > h.uncompressed_size / 4)
      return damaged(absl::StrCat("a dictionary page of ", h.uncompressed_size, " bytes claims ",
                                  h.num_values, " values"));
    // The index keeps each value's offset (4 bytes per value, at most the page's size): the
    // value is its 4-byte length and bytes there, checked here once.
    PlainByteArrays values(data, static_cast<size_t>(h.uncompressed_size));
    dict_.reserve(static_cast<size_t>(h.num_values));
    for (int32_t i = 0; i < h.num_values; ++i) {
      const size_t at = static_cast<size_t>(h.uncompressed_size) - values.left();
      std::string_view v;
      if (!values.next(&v)) return damaged(absl::StrCat("the dictionary page: ", values.error()));
      dict_.push_back(static_cast<uint32_t>(at));
    }
    dict_data_ = data;
    have_dict_ = true;
    return absl::OkStatus();
  }

  data_page_seen_ = true;
  if (h.num_values > chunk_values_left_)
    return damaged(absl::StrCat("the data pages hold more values than the column chunk's ",
                                meta_.chunks[rg_].num_values));
  const uint8_t* values = nullptr;
  size_t values_len = 0;
  if (h.type == kDataPage) {
    const uint8_t* page = nullptr;
    VT_RETURN_IF_ERROR(decompress(raw, static_cast<size_t>(h.compressed_size),
                                  static_cast<size_t>(h.uncompressed_size), &page_buf_, &page));
    size_t at = 0;
    const size_t n = static_cast<size_t>(h.uncompressed_size);
    if (max_def_ > 0) {
      if (h.def_encoding == kBitPacked)
        return absl::UnimplementedError(absl::StrCat(path_, ": row group ", rg_ + 1, ": definition "
                                                     "levels in the deprecated BIT_PACKED encoding "
                                                     "are not supported"));
      if (h.def_encoding != kRle)
        return damaged(absl::StrCat("definition levels in the ", encoding_name(h.def_encoding), " encoding"));
      if (n < 4) return damaged("a data page too short for its definition levels' length");
      const uint32_t len = le32(page);
      if (len > n - 4) return damaged(absl::StrCat("definition levels of ", len, " bytes in a page of ", n));
      def_ = RleBitPackedDecoder(page + 4, len, 1);
      at = 4 + len;
    }
    values = page + at;
    values_len = n - at;
    page_nulls_expected_ = -1;
  } else {  // data page v2: levels uncompressed ahead of the (maybe compressed) values
    const int64_t levels = static_cast<int64_t>(h.rep_bytes) + h.def_bytes;
    if (levels > h.compressed_size || levels > h.uncompressed_size)
      return damaged(absl::StrCat("a v2 data page's levels (", levels, " bytes) exceed the page"));
    if (max_def_ > 0) def_ = RleBitPackedDecoder(raw + h.rep_bytes, static_cast<size_t>(h.def_bytes), 1);
    const size_t in_len = static_cast<size_t>(h.compressed_size - levels);
    const size_t out_len = static_cast<size_t>(h.uncompressed_size - levels);
    if (h.is_compressed && codec != kUncompressed) {
      VT_RETURN_IF_ERROR(decompress(raw + levels, in_len, out_len, &page_buf_, &values));
    } else {
      if (in_len != out_len)
        return damaged(absl::StrCat("an uncompressed v2 page holds ", in_len, " value bytes where its header says ", out_len));
      values = raw + levels;
    }
    values_len = out_len;
    if (max_def_ == 0 && h.num_nulls != 0)
      return damaged(absl::StrCat("a page of a required column claims ", h.num_nulls, " nulls"));
    page_nulls_expected_ = h.num_nulls;
  }
  VT_RETURN_IF_ERROR(setup_values(h.encoding, values, values_len));
  page_left_ = h.num_values;
  page_nulls_ = 0;
  chunk_values_left_ -= h.num_values;
  return absl::OkStatus();
}

absl::StatusOr<bool> ParquetTextReader::next(std::string_view* value, bool* null) {
  for (;;) {
    if (page_left_ > 0) {
      --page_left_;
      ++row_;
      bool present = true;
      if (max_def_ > 0) {
        uint32_t level = 0;
        if (!def_.next(&level)) return damaged(absl::StrCat("definition levels: ", def_.error()));
        if (level > 1) return damaged(absl::StrCat("definition level ", level, " where the most is 1"));
        present = level == 1;
      }
      if (!present) {
        ++page_nulls_;
        *null = true;
      } else if (dict_mode_) {
        uint32_t i = 0;
        if (!indices_.next(&i)) return damaged(absl::StrCat("dictionary indices: ", indices_.error()));
        if (i >= dict_.size())
          return damaged(absl::StrCat("dictionary index ", i, " past the dictionary's ", dict_.size(), " values"));
        const uint8_t* at = dict_data_ + dict_[i];
        *value = std::string_view(reinterpret_cast<const char*>(at + 4), le32(at));
        *null = false;
      } else {
        if (!plain_.next(value)) return damaged(absl::StrCat("values: ", plain_.error()));
        *null = false;
      }
      if (page_left_ == 0 && page_nulls_expected_ >= 0 && page_nulls_ != page_nulls_expected_)
        return damaged(absl::StrCat("a v2 data page with ", page_nulls_, " nulls where its header says ",
                                    page_nulls_expected_));
      return true;
    }
    if (chunk_values_left_ > 0) {
      VT_RETURN_IF_ERROR(load_page());
      continue;
    }
    if (rg_ + 1 >= meta_.chunks.size()) return false;
    VT_RETURN_IF_ERROR(start_chunk(rg_ + 1));
  }
}

}  // namespace vt::data
