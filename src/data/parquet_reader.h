// ParquetTextReader: the values of one top-level string column of a Parquet file (FineWeb-Edu's
// and nanochat's shards: a `text` column among others), in row order, for `vtrain prepare`.
//   What is read: the footer (magic PAR1 at both ends, the FileMetaData length), the chosen
//   column's chunk in every row group, and in each chunk its pages one at a time: an optional
//   dictionary page (PLAIN) and data pages v1 and v2 with PLAIN or dictionary (PLAIN_DICTIONARY,
//   RLE_DICTIONARY) values, definition levels (RLE hybrid) for an OPTIONAL column, compressed
//   UNCOMPRESSED, SNAPPY, GZIP or ZSTD (data/parquet_codec.h); page CRCs are checked when given.
//   The other columns are never read.
//   Refused when opening (InvalidArgument, naming the file): no such top-level column (the
//   message lists the file's columns), a column that is a group, repeated, not BYTE_ARRAY, or
//   BYTE_ARRAY without the STRING/UTF8 annotation. Refused as unsupported (Unimplemented):
//   encrypted files, chunks stored in other files, other codecs, other value encodings (DELTA_*),
//   BIT_PACKED definition levels.
//   Damage (DataLoss, naming the file and the row group): not a Parquet file, a truncated file, a
//   bad footer length, metadata or page headers that do not decode or contradict each other
//   (offsets outside the file, value counts that do not add up), pages that do not decompress to
//   their declared size, levels, indices or lengths that reach past their page, a CRC mismatch.
//   Nothing is read outside the file's bytes or a page's buffer, whatever the file says.
// Memory: the footer (at most 64 MiB), and for the current row group one page as read and as
// decompressed, its dictionary page and the dictionary's index (4 bytes per value, no more than
// the page): each at most max_page_bytes, since a page larger than that is refused
// (ResourceExhausted) rather than held.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/parquet_encoding.h"
#include "data/parquet_meta.h"

namespace vt::data {

class ParquetTextReader {
 public:
  static constexpr int64_t kMaxFooterBytes = int64_t{64} << 20;

  ~ParquetTextReader();
  static absl::StatusOr<std::unique_ptr<ParquetTextReader>> open(const std::string& path,
                                                                 const std::string& column,
                                                                 int64_t max_page_bytes);
  // The next row: *null when its value is null, else *value views its bytes (valid until the
  // next call). false at the end of the file.
  absl::StatusOr<bool> next(std::string_view* value, bool* null);
  // "row R (row group G of N)" for the row next() returned last (both 1-based).
  std::string where() const;
  int64_t num_rows() const { return meta_.num_rows; }

 private:
  // A growable byte buffer that is never zero-filled.
  struct Buffer {
    std::unique_ptr<uint8_t[]> bytes;
    size_t capacity = 0;
    uint8_t* reserve(size_t n);
  };

  ParquetTextReader() = default;
  absl::Status check_chunks(int64_t footer_start);
  absl::Status start_chunk(size_t rg);
  absl::Status load_page();
  absl::Status read_at(int64_t offset, size_t n, uint8_t* out);
  absl::Status setup_values(int32_t encoding, const uint8_t* data, size_t n);
  absl::Status damaged(const std::string& why) const;  // DataLoss naming file and row group

  std::string path_;
  int fd_ = -1;
  int64_t max_page_bytes_ = 0;
  parquet::FileMeta meta_;
  int max_def_ = 0;  // 1 for an OPTIONAL column

  // The current column chunk.
  size_t rg_ = 0;
  int64_t pos_ = 0, end_ = 0;        // the next page header's offset; the chunk's end
  int64_t chunk_values_left_ = 0;
  int64_t row_ = 0;                  // rows returned so far (file-wide)
  bool data_page_seen_ = false;
  Buffer dict_buf_;
  const uint8_t* dict_data_ = nullptr;  // the dictionary page's values (PLAIN)
  std::vector<uint32_t> dict_;          // each value's offset in dict_data_
  bool have_dict_ = false;

  // The current data page.
  Buffer header_buf_, raw_buf_, page_buf_;
  int64_t page_left_ = 0;
  int64_t page_nulls_expected_ = -1;  // v2 pages: num_nulls; -1: not checked
  int64_t page_nulls_ = 0;
  parquet::RleBitPackedDecoder def_;
  bool dict_mode_ = false;
  parquet::RleBitPackedDecoder indices_;
  parquet::PlainByteArrays plain_;
};

}  // namespace vt::data
