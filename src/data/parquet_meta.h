// The parts of a Parquet file's metadata that reading one text column needs, decoded by hand
// from Thrift's compact protocol (data/thrift_compact.h) as apache/parquet-format's
// parquet.thrift declares them: the footer's FileMetaData (the schema, searched for one
// top-level column, and per row group that column's chunk) and the page headers.
// Only what is used is kept (a footer's other columns are skipped, never stored), so memory is
// the footer's bytes plus a few dozen bytes per row group whatever the footer claims. Bytes that
// do not decode, required fields that are missing and values out of range are errors saying
// what is wrong; the caller names the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::data::parquet {

// parquet.thrift's enums (the values used here).
enum PhysicalType : int32_t { kByteArray = 6 };
enum Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum ConvertedType : int32_t { kUtf8 = 0 };
enum LogicalTypeId : int32_t { kLogicalString = 1 };  // LogicalType union's STRING member
enum Codec : int32_t { kUncompressed = 0, kSnappy = 1, kGzip = 2, kZstd = 6 };
enum Encoding : int32_t {
  kPlain = 0, kPlainDictionary = 2, kRle = 3, kBitPacked = 4, kRleDictionary = 8,
};
enum PageType : int32_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };

const char* physical_type_name(int32_t t);
const char* codec_name(int32_t c);
const char* encoding_name(int32_t e);

// The chosen column as the schema declares it.
struct ColumnSchema {
  bool found = false;
  int32_t physical_type = -1;    // -1: a group (it has children)
  int32_t repetition = -1;       // -1: not given
  int32_t converted_type = -1;   // -1: none
  int32_t logical_type = -1;     // the LogicalType union member's field id; -1: none
  int32_t leaf_index = -1;       // its position among the schema's leaves (= column chunks)
  int32_t leaves = 0;            // leaf columns in the schema
  std::vector<std::string> top_level_names;  // the root's children (for messages; first 32)
};

// The chosen column's chunk in one row group.
struct ColumnChunk {
  int64_t num_rows = 0;          // the row group's rows
  bool has_meta = false;         // ColumnChunk.meta_data was present
  bool external = false;         // ColumnChunk.file_path set: the data is in another file
  bool encrypted = false;        // crypto_metadata or encrypted_column_metadata set
  bool path_matches = false;     // path_in_schema is exactly [column]
  int32_t physical_type = -1;
  int32_t codec = -1;
  int64_t num_values = -1;
  int64_t total_compressed_size = -1;
  int64_t data_page_offset = -1;
  int64_t dictionary_page_offset = -1;  // -1: not given
};

struct FileMeta {
  int64_t num_rows = 0;
  bool encrypted = false;        // encryption_algorithm set (an encrypted file, plaintext footer)
  std::string created_by;
  ColumnSchema column;
  std::vector<ColumnChunk> chunks;  // one per row group, in file order
};

// Decodes FileMetaData from the footer's bytes, keeping the schema facts of top-level `column`
// and its chunk in every row group (a row group whose column list does not match the schema's
// leaves is an error). A missing column is not an error here: column.found says.
absl::StatusOr<FileMeta> decode_file_meta(const uint8_t* data, size_t size, const std::string& column);

struct PageHeader {
  int32_t type = -1;
  int32_t uncompressed_size = -1;
  int32_t compressed_size = -1;
  bool has_crc = false;
  uint32_t crc = 0;
  // DataPageHeader (v1), DataPageHeaderV2 or DictionaryPageHeader, by type.
  int32_t num_values = -1;
  int32_t encoding = -1;
  int32_t def_encoding = -1;     // v1
  int32_t num_nulls = -1;        // v2
  int32_t def_bytes = -1;        // v2: definition levels' length
  int32_t rep_bytes = -1;        // v2: repetition levels' length
  bool is_compressed = true;     // v2
  bool has_type_header = false;  // the header of `type` was present
};

// Decodes a page header from the start of [data, size). Returns its length in bytes.
// *truncated: the bytes ended inside the header (more bytes might complete it).
absl::StatusOr<size_t> decode_page_header(const uint8_t* data, size_t size, PageHeader* h,
                                          bool* truncated);

}  // namespace vt::data::parquet
