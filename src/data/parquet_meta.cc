// Parquet FileMetaData and PageHeader decoding (see parquet_meta.h). Field ids are
// parquet.thrift's. The footer is read in two passes: the schema first (to learn the chosen
// column's leaf index, whatever order the fields come in), then the row groups, keeping that
// column's chunk only.
#include "data/parquet_meta.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "data/thrift_compact.h"

namespace vt::data::parquet {
namespace {

using T = ThriftType;

constexpr int kMaxSchemaDepth = 1024;
constexpr size_t kMaxNamesKept = 32;

bool is_int(T t) { return t == T::kByte || t == T::kI16 || t == T::kI32 || t == T::kI64; }

// A field of the wrong type for its id is corrupt metadata (Thrift would skip it; a reader of
// untrusted bytes learns nothing from a wrongly typed required field but a later surprise).
bool expect(ThriftCompactReader& r, const char* what, T got, bool ok) {
  if (!ok) r.fail(absl::StrCat(what, " has Thrift type ", static_cast<int>(got)));
  return ok;
}

int32_t read_int_field(ThriftCompactReader& r, const char* what, T t) {
  return expect(r, what, t, is_int(t)) ? r.read_i32(t) : 0;
}

int64_t read_long_field(ThriftCompactReader& r, const char* what, T t) {
  return expect(r, what, t, is_int(t)) ? r.read_int(t) : 0;
}

struct SchemaElement {
  std::string_view name;
  bool has_name = false, has_type = false;
  int32_t type = -1, repetition = -1, num_children = -1, converted = -1, logical = -1;
};

SchemaElement read_schema_element(ThriftCompactReader& r) {
  SchemaElement e;
  r.begin_struct();
  int16_t id;
  T t;
  while (r.next_field(&id, &t)) {
    switch (id) {
      case 1: e.type = read_int_field(r, "SchemaElement.type", t); e.has_type = true; break;
      case 3: e.repetition = read_int_field(r, "SchemaElement.repetition_type", t); break;
      case 4:
        if (expect(r, "SchemaElement.name", t, t == T::kBinary)) e.name = r.read_binary();
        e.has_name = true;
        break;
      case 5: e.num_children = read_int_field(r, "SchemaElement.num_children", t); break;
      case 6: e.converted = read_int_field(r, "SchemaElement.converted_type", t); break;
      case 10: {  // LogicalType: a union; the member's field id names the type
        if (!expect(r, "SchemaElement.logicalType", t, t == T::kStruct)) break;
        r.begin_struct();
        int16_t mid;
        T mt;
        while (r.next_field(&mid, &mt)) {
          if (e.logical < 0) e.logical = mid;
          r.skip(mt);
        }
        r.end_struct();
        break;
      }
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (r.ok() && !e.has_name) r.fail("a schema element has no name");
  if (r.ok() && e.num_children < -1) r.fail(absl::StrCat("a schema element has ", e.num_children, " children"));
  return e;
}

// The schema list: a depth-first flattening of the tree (element 0 is the root). Walked with a
// stack of the children each open group still expects, keeping nothing but the chosen column.
void read_schema(ThriftCompactReader& r, const std::string& column, ColumnSchema* out) {
  T elem;
  int64_t n = 0;
  if (!r.read_list_header(&elem, &n)) return;
  if (!expect(r, "FileMetaData.schema's elements", elem, elem == T::kStruct)) return;
  if (n == 0) {
    r.fail("the schema is empty");
    return;
  }
  std::vector<int64_t> open;  // children still expected, per open group
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    const SchemaElement e = read_schema_element(r);
    if (!r.ok()) return;
    if (i == 0) {
      if (e.num_children > 0) open.push_back(e.num_children);
      continue;
    }
    if (open.empty()) {
      r.fail(absl::StrCat("the schema lists ", n, " elements but its tree holds only ", i));
      return;
    }
    const bool leaf = e.has_type && e.num_children <= 0;
    if (open.size() == 1) {  // a child of the root
      if (out->top_level_names.size() < kMaxNamesKept) out->top_level_names.emplace_back(e.name);
      if (!out->found && e.name == column) {
        out->found = true;
        out->physical_type = leaf ? e.type : -1;
        out->repetition = e.repetition;
        out->converted_type = e.converted;
        out->logical_type = e.logical;
        if (leaf) out->leaf_index = out->leaves;
      }
    }
    if (leaf) ++out->leaves;
    --open.back();
    if (e.num_children > 0) {
      if (static_cast<int>(open.size()) >= kMaxSchemaDepth) {
        r.fail(absl::StrCat("the schema is nested deeper than ", kMaxSchemaDepth));
        return;
      }
      open.push_back(e.num_children);
    }
    while (!open.empty() && open.back() == 0) open.pop_back();
  }
  if (r.ok() && !open.empty()) r.fail("the schema ends before its tree is complete");
}

void read_column_meta(ThriftCompactReader& r, const std::string& column, ColumnChunk* c) {
  r.begin_struct();
  int16_t id;
  T t;
  while (r.next_field(&id, &t)) {
    switch (id) {
      case 1: c->physical_type = read_int_field(r, "ColumnMetaData.type", t); break;
      case 3: {
        if (!expect(r, "ColumnMetaData.path_in_schema", t, t == T::kList)) break;
        T elem;
        int64_t n = 0;
        if (!r.read_list_header(&elem, &n)) break;
        if (!expect(r, "path_in_schema's elements", elem, elem == T::kBinary)) break;
        bool match = n == 1;
        for (int64_t i = 0; i < n && r.ok(); ++i) match = r.read_binary() == column && match;
        c->path_matches = match;
        break;
      }
      case 4: c->codec = read_int_field(r, "ColumnMetaData.codec", t); break;
      case 5: c->num_values = read_long_field(r, "ColumnMetaData.num_values", t); break;
      case 7: c->total_compressed_size = read_long_field(r, "ColumnMetaData.total_compressed_size", t); break;
      case 9: c->data_page_offset = read_long_field(r, "ColumnMetaData.data_page_offset", t); break;
      case 11: c->dictionary_page_offset = read_long_field(r, "ColumnMetaData.dictionary_page_offset", t); break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (!r.ok()) return;
  if (c->physical_type < 0 || c->codec < 0 || c->num_values < 0 || c->total_compressed_size < 0 ||
      c->data_page_offset < 0)
    r.fail("a column chunk's metadata lacks a required field or holds a negative size or offset");
}

void read_column_chunk(ThriftCompactReader& r, const std::string& column, ColumnChunk* c) {
  r.begin_struct();
  int16_t id;
  T t;
  while (r.next_field(&id, &t)) {
    switch (id) {
      case 1: c->external = true; r.skip(t); break;
      case 3:
        if (!expect(r, "ColumnChunk.meta_data", t, t == T::kStruct)) break;
        c->has_meta = true;
        read_column_meta(r, column, c);
        break;
      case 8:
      case 9: c->encrypted = true; r.skip(t); break;
      default: r.skip(t);
    }
  }
  r.end_struct();
}

void read_row_group(ThriftCompactReader& r, const ColumnSchema& schema, const std::string& column,
                    ColumnChunk* c) {
  bool have_columns = false, have_rows = false;
  r.begin_struct();
  int16_t id;
  T t;
  while (r.next_field(&id, &t)) {
    if (id == 1) {
      if (!expect(r, "RowGroup.columns", t, t == T::kList)) break;
      T elem;
      int64_t n = 0;
      if (!r.read_list_header(&elem, &n)) break;
      if (!expect(r, "RowGroup.columns' elements", elem, elem == T::kStruct)) break;
      if (n != schema.leaves) {
        r.fail(absl::StrCat("a row group has ", n, " column chunks for the schema's ", schema.leaves,
                            " columns"));
        break;
      }
      for (int64_t i = 0; i < n && r.ok(); ++i) {
        if (i == schema.leaf_index) {
          read_column_chunk(r, column, c);
        } else {
          r.skip(T::kStruct);
        }
      }
      have_columns = true;
    } else if (id == 3) {
      c->num_rows = read_long_field(r, "RowGroup.num_rows", t);
      have_rows = true;
    } else {
      r.skip(t);
    }
  }
  r.end_struct();
  if (r.ok() && (!have_columns || !have_rows)) r.fail("a row group lacks its columns or its row count");
  if (r.ok() && c->num_rows < 0) r.fail(absl::StrCat("a row group has ", c->num_rows, " rows"));
}

}  // namespace

const char* physical_type_name(int32_t t) {
  static const char* const kNames[] = {"BOOLEAN", "INT32", "INT64", "INT96",
                                       "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? kNames[t] : "an unknown type";
}

const char* codec_name(int32_t c) {
  static const char* const kNames[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                       "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return c >= 0 && c < 8 ? kNames[c] : "an unknown codec";
}

const char* encoding_name(int32_t e) {
  static const char* const kNames[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE",
                                       "BIT_PACKED", "DELTA_BINARY_PACKED",
                                       "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                       "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return e >= 0 && e < 10 ? kNames[e] : "an unknown encoding";
}

absl::StatusOr<FileMeta> decode_file_meta(const uint8_t* data, size_t size, const std::string& column) {
  FileMeta meta;
  bool have_schema = false, have_rows = false, have_groups = false;
  {  // Pass 1: everything but the row groups.
    ThriftCompactReader r(data, size);
    r.begin_struct();
    int16_t id;
    T t;
    while (r.next_field(&id, &t)) {
      switch (id) {
        case 2:
          if (!expect(r, "FileMetaData.schema", t, t == T::kList)) break;
          read_schema(r, column, &meta.column);
          have_schema = true;
          break;
        case 3: meta.num_rows = read_long_field(r, "FileMetaData.num_rows", t); have_rows = true; break;
        case 4: have_groups = true; r.skip(t); break;
        case 6:
          if (expect(r, "FileMetaData.created_by", t, t == T::kBinary)) meta.created_by = r.read_binary();
          break;
        case 8: meta.encrypted = true; r.skip(t); break;
        default: r.skip(t);
      }
    }
    r.end_struct();
    if (!r.ok()) return absl::DataLossError(absl::StrCat("corrupt footer: ", r.error()));
    if (!have_schema || !have_rows || !have_groups)
      return absl::DataLossError("corrupt footer: FileMetaData lacks its schema, row count or row groups");
  }
  if (!meta.column.found || meta.column.leaf_index < 0) return meta;  // the caller says why
  // Pass 2: the chosen column's chunk in every row group.
  ThriftCompactReader r(data, size);
  r.begin_struct();
  int16_t id;
  T t;
  while (r.next_field(&id, &t)) {
    if (id != 4) {
      r.skip(t);
      continue;
    }
    if (!expect(r, "FileMetaData.row_groups", t, t == T::kList)) break;
    T elem;
    int64_t n = 0;
    if (!r.read_list_header(&elem, &n)) break;
    if (!expect(r, "row_groups' elements", elem, elem == T::kStruct)) break;
    for (int64_t i = 0; i < n && r.ok(); ++i) {
      ColumnChunk c;
      read_row_group(r, meta.column, column, &c);
      if (r.ok()) meta.chunks.push_back(c);
    }
  }
  r.end_struct();
  if (!r.ok()) return absl::DataLossError(absl::StrCat("corrupt footer: ", r.error()));
  return meta;
}

absl::StatusOr<size_t> decode_page_header(const uint8_t* data, size_t size, PageHeader* h,
                                          bool* truncated) {
  *h = PageHeader{};
  *truncated = false;
  ThriftCompactReader r(data, size);
  bool have_type_fields = false;
  r.begin_struct();
  int16_t id;
  T t;
  while (r.next_field(&id, &t)) {
    switch (id) {
      case 1: h->type = read_int_field(r, "PageHeader.type", t); break;
      case 2: h->uncompressed_size = read_int_field(r, "PageHeader.uncompressed_page_size", t); break;
      case 3: h->compressed_size = read_int_field(r, "PageHeader.compressed_page_size", t); break;
      case 4:
        h->crc = static_cast<uint32_t>(read_int_field(r, "PageHeader.crc", t));
        h->has_crc = true;
        break;
      case 5:
      case 7:
      case 8: {  // DataPageHeader, DictionaryPageHeader, DataPageHeaderV2
        if (!expect(r, "a page's type header", t, t == T::kStruct)) break;
        if (id != (h->type == kDataPage ? 5 : h->type == kDictionaryPage ? 7 : h->type == kDataPageV2 ? 8 : -1)) {
          r.skip(t);  // not this page's kind (or the type comes later): not used
          break;
        }
        h->has_type_header = true;
        int required = 0;
        r.begin_struct();
        int16_t f;
        T ft;
        while (r.next_field(&f, &ft)) {
          if (f == 1) {
            h->num_values = read_int_field(r, "num_values", ft);
            ++required;
          } else if (id == 5 && f == 2) {
            h->encoding = read_int_field(r, "encoding", ft);
            ++required;
          } else if (id == 5 && f == 3) {
            h->def_encoding = read_int_field(r, "definition_level_encoding", ft);
            ++required;
          } else if (id == 7 && f == 2) {
            h->encoding = read_int_field(r, "encoding", ft);
            ++required;
          } else if (id == 8 && f == 2) {
            h->num_nulls = read_int_field(r, "num_nulls", ft);
            ++required;
          } else if (id == 8 && f == 4) {
            h->encoding = read_int_field(r, "encoding", ft);
            ++required;
          } else if (id == 8 && f == 5) {
            h->def_bytes = read_int_field(r, "definition_levels_byte_length", ft);
            ++required;
          } else if (id == 8 && f == 6) {
            h->rep_bytes = read_int_field(r, "repetition_levels_byte_length", ft);
            ++required;
          } else if (id == 8 && f == 7) {
            if (expect(r, "is_compressed", ft, ft == T::kTrue || ft == T::kFalse))
              h->is_compressed = ft == T::kTrue;
          } else {
            r.skip(ft);
          }
        }
        r.end_struct();
        have_type_fields = required == (id == 5 ? 3 : id == 7 ? 2 : 5);
        break;
      }
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (!r.ok()) {
    *truncated = r.truncated();
    return absl::DataLossError(absl::StrCat("corrupt page header: ", r.error()));
  }
  if (h->type < 0 || h->uncompressed_size < 0 || h->compressed_size < 0)
    return absl::DataLossError("corrupt page header: a required field is missing or negative");
  if (h->has_type_header && (!have_type_fields || h->num_values < 0 ||
                             (h->type == kDataPageV2 && (h->num_nulls < 0 || h->def_bytes < 0 ||
                                                         h->rep_bytes < 0))))
    return absl::DataLossError("corrupt page header: the data or dictionary page header lacks a "
                               "required field or holds a negative count");
  return r.position();
}

}  // namespace vt::data::parquet
