// The Parquet text reader's parts on hand-made bytes: the Thrift compact reader, the RLE /
// bit-packed hybrid (Encodings.md's own example), PLAIN byte arrays, page headers, page
// decompression; then ParquetTextReader on files from tests/support/parquet_writer.h (every codec,
// PLAIN and dictionary values, data pages v1 and v2, nulls), and its refusals: a missing or
// non-string column, every truncation of a file, a CRC mismatch. Files pyarrow writes are checked
// end to end in tests/data/test_prepare_parquet.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../support/parquet_writer.h"
#include "core/check.h"
#include "data/document_reader.h"
#include "data/parquet_codec.h"
#include "data/parquet_encoding.h"
#include "data/parquet_meta.h"
#include "data/parquet_reader.h"
#include "data/thrift_compact.h"

namespace vt::data {
namespace {
namespace fs = std::filesystem;
using parquet::PlainByteArrays;
using parquet::RleBitPackedDecoder;
using test::ParquetWriteOptions;
using test::write_parquet;
using Values = std::vector<std::optional<std::string>>;

std::vector<uint8_t> bytes(std::initializer_list<int> v) { return std::vector<uint8_t>(v.begin(), v.end()); }

fs::path dir() {
  fs::path d = fs::path(::testing::TempDir()) / ("vt_parquet_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string save(const std::string& name, const std::string& content) {
  const fs::path p = dir() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
  return p.string();
}

// Every row of `path`'s column (nullopt for a null), or the error.
absl::StatusOr<Values> read_all(const std::string& path, const std::string& column = "text",
                                int64_t max_page = 1 << 20) {
  VT_ASSIGN_OR_RETURN(auto r, ParquetTextReader::open(path, column, max_page));
  Values out;
  for (;;) {
    std::string_view v;
    bool null = false;
    VT_ASSIGN_OR_RETURN(bool got, r->next(&v, &null));
    if (!got) return out;
    if (null) {
      out.push_back(std::nullopt);
    } else {
      out.push_back(std::string(v));
    }
  }
}

TEST(ThriftCompact, ReadsFieldsIntsBinariesListsAndSkipsTheRest) {
  // struct { 1: i32 -3; 2: binary "hi"; 20 (long form): i64 300; 21: true;
  //          22: list<i32> [1, 2]; 23: struct { 1: double; 2: map<i32,binary>{1:"x"} } }
  const auto b = bytes({0x15, 0x05, 0x18, 0x02, 'h', 'i', 0x06, 0x28, 0xd8, 0x04, 0x11, 0x19, 0x25, 0x01, 0x04,
                        0x1c, 0x17, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x1b, 0x01, 0x58, 0x02, 0x01, 'x', 0x00, 0x00});
  ThriftCompactReader r(b.data(), b.size());
  r.begin_struct();
  int16_t id;
  ThriftType t;
  ASSERT_TRUE(r.next_field(&id, &t));
  EXPECT_EQ(id, 1);
  EXPECT_EQ(r.read_i32(t), -3);
  ASSERT_TRUE(r.next_field(&id, &t));
  EXPECT_EQ(id, 2);
  EXPECT_EQ(r.read_binary(), "hi");
  ASSERT_TRUE(r.next_field(&id, &t));
  EXPECT_EQ(id, 20);
  EXPECT_EQ(r.read_int(t), 300);
  ASSERT_TRUE(r.next_field(&id, &t));
  EXPECT_EQ(id, 21);
  EXPECT_EQ(t, ThriftType::kTrue);
  ASSERT_TRUE(r.next_field(&id, &t));
  EXPECT_EQ(id, 22);
  ThriftType elem;
  int64_t n = 0;
  ASSERT_TRUE(r.read_list_header(&elem, &n));
  EXPECT_EQ(elem, ThriftType::kI32);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(r.read_int(elem), -1);
  EXPECT_EQ(r.read_int(elem), 2);
  ASSERT_TRUE(r.next_field(&id, &t));
  EXPECT_EQ(id, 23);
  r.skip(t);
  EXPECT_FALSE(r.next_field(&id, &t));  // the outer STOP
  EXPECT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.position(), b.size());
}

TEST(ThriftCompact, RefusesTruncationOversizedListsDepthAndUnknownTypes) {
  {
    const auto b = bytes({0x15, 0x80});  // a varint cut off
    ThriftCompactReader r(b.data(), b.size());
    r.begin_struct();
    int16_t id;
    ThriftType t;
    ASSERT_TRUE(r.next_field(&id, &t));
    r.read_int(t);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(r.truncated());
    EXPECT_FALSE(r.next_field(&id, &t));  // errors are sticky
  }
  {
    const auto b = bytes({0xf5, 0xff, 0xff, 0x03, 0x00});  // a list of 65535 i32s in 5 bytes
    ThriftCompactReader r(b.data(), b.size());
    ThriftType elem;
    int64_t n = 0;
    EXPECT_FALSE(r.read_list_header(&elem, &n));
    EXPECT_NE(r.error().find("longer than the metadata left"), std::string::npos) << r.error();
  }
  {
    std::vector<uint8_t> b;
    for (int i = 0; i < 100; ++i) b.push_back(0x1c);  // field 1: struct, nested 100 deep
    b.insert(b.end(), 101, 0x00);
    ThriftCompactReader r(b.data(), b.size());
    r.skip(ThriftType::kStruct);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error().find("deeper than"), std::string::npos) << r.error();
  }
  {
    const auto b = bytes({0x1d, 0x00});  // field type 13 does not exist
    ThriftCompactReader r(b.data(), b.size());
    r.begin_struct();
    int16_t id;
    ThriftType t;
    EXPECT_FALSE(r.next_field(&id, &t));
    EXPECT_NE(r.error().find("unknown field type 13"), std::string::npos) << r.error();
  }
  {
    const auto b = bytes({0x18, 0x05, 'a', 'b'});  // a binary of 5 bytes with 2 present
    ThriftCompactReader r(b.data(), b.size());
    r.begin_struct();
    int16_t id;
    ThriftType t;
    ASSERT_TRUE(r.next_field(&id, &t));
    EXPECT_EQ(r.read_binary(), "");
    EXPECT_TRUE(r.truncated());
  }
}

TEST(RleBitPacked, DecodesTheSpecExampleAndRuns) {
  // Encodings.md: values 0..7 at bit width 3 bit-pack to 10001000 11000110 11111010.
  const auto packed = bytes({0x03, 0x88, 0xc6, 0xfa});
  RleBitPackedDecoder d(packed.data(), packed.size(), 3);
  for (uint32_t want = 0; want < 8; ++want) {
    uint32_t v = 99;
    ASSERT_TRUE(d.next(&v)) << d.error();
    EXPECT_EQ(v, want);
  }
  uint32_t v = 0;
  EXPECT_FALSE(d.next(&v));  // the data ends
  // An RLE run of 5 x 300 at width 9 (2 value bytes), then 2 x 1.
  const auto runs = bytes({0x0a, 0x2c, 0x01, 0x04, 0x01, 0x00});
  RleBitPackedDecoder r(runs.data(), runs.size(), 9);
  for (uint32_t want : {300u, 300u, 300u, 300u, 300u, 1u, 1u}) {
    ASSERT_TRUE(r.next(&v)) << r.error();
    EXPECT_EQ(v, want);
  }
  // Width 0: every value is 0 and no value bytes are read.
  const auto zero = bytes({0x06});
  RleBitPackedDecoder z(zero.data(), zero.size(), 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(z.next(&v));
    EXPECT_EQ(v, 0u);
  }
  EXPECT_FALSE(z.next(&v));
}

TEST(RleBitPacked, RefusesCutValuesAndTooWideRunValues) {
  uint32_t v = 0;
  const auto cut = bytes({0x04, 0x2c});  // a run at width 9 with one of its two value bytes
  RleBitPackedDecoder a(cut.data(), cut.size(), 9);
  EXPECT_FALSE(a.next(&v));
  EXPECT_NE(a.error().find("cut off"), std::string::npos) << a.error();
  const auto wide = bytes({0x04, 0x02});  // value 2 does not fit 1 bit
  RleBitPackedDecoder b(wide.data(), wide.size(), 1);
  EXPECT_FALSE(b.next(&v));
  EXPECT_NE(b.error().find("does not fit"), std::string::npos) << b.error();
  // A bit-packed run that claims 8 groups but has one byte: the values that byte holds, then end.
  const auto short_run = bytes({0x11, 0xff});
  RleBitPackedDecoder c(short_run.data(), short_run.size(), 1);
  int got = 0;
  while (c.next(&v)) ++got;
  EXPECT_EQ(got, 8);
}

TEST(PlainByteArrays, ReadsValuesAndRefusesLengthsPastTheEnd) {
  const auto b = bytes({2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0, 9, 0, 0, 0, 'x'});
  PlainByteArrays p(b.data(), b.size());
  std::string_view v;
  ASSERT_TRUE(p.next(&v));
  EXPECT_EQ(v, "hi");
  ASSERT_TRUE(p.next(&v));
  EXPECT_EQ(v, "");
  EXPECT_FALSE(p.next(&v));
  EXPECT_NE(p.error().find("9 bytes runs past"), std::string::npos) << p.error();
}

TEST(ParquetMeta, DecodesAPageHeaderByHand) {
  // PageHeader{type DATA_PAGE, uncompressed 100, compressed 50,
  //            data_page_header{num_values 10, PLAIN, RLE, RLE}}
  const auto b = bytes({0x15, 0x00, 0x15, 0xc8, 0x01, 0x15, 0x64, 0x2c, 0x15, 0x14, 0x15, 0x00,
                        0x15, 0x06, 0x15, 0x06, 0x00, 0x00, 0xee});
  parquet::PageHeader h;
  bool truncated = true;
  auto n = parquet::decode_page_header(b.data(), b.size(), &h, &truncated);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, b.size() - 1);
  EXPECT_EQ(h.type, parquet::kDataPage);
  EXPECT_EQ(h.uncompressed_size, 100);
  EXPECT_EQ(h.compressed_size, 50);
  EXPECT_TRUE(h.has_type_header);
  EXPECT_EQ(h.num_values, 10);
  EXPECT_EQ(h.encoding, parquet::kPlain);
  EXPECT_EQ(h.def_encoding, parquet::kRle);
  EXPECT_FALSE(h.has_crc);
  // Cut anywhere inside, the header says it is truncated (so the reader reads more).
  for (size_t cut = 1; cut + 1 < b.size(); ++cut) {
    auto m = parquet::decode_page_header(b.data(), cut, &h, &truncated);
    EXPECT_FALSE(m.ok()) << cut;
    EXPECT_TRUE(truncated) << cut;
  }
}

TEST(ParquetCodec, DecompressesEachCodecToTheDeclaredSizeOnly) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += "value " + std::to_string(i % 37) + "; ";
  for (int codec : {0, 1, 2, 6}) {
    const std::string z = test::compress_block(codec, text);
    std::vector<uint8_t> out(text.size());
    auto st = parquet::decompress_page(codec, reinterpret_cast<const uint8_t*>(z.data()), z.size(), out.data(), out.size());
    ASSERT_TRUE(st.ok()) << codec << " " << st;
    EXPECT_EQ(std::string(out.begin(), out.end()), text) << codec;
    std::vector<uint8_t> small(text.size() - 1);
    st = parquet::decompress_page(codec, reinterpret_cast<const uint8_t*>(z.data()), z.size(), small.data(), small.size());
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << codec << " " << st;
    if (codec != 0) {
      st = parquet::decompress_page(codec, reinterpret_cast<const uint8_t*>(z.data()), z.size() / 2, out.data(), out.size());
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << codec << " " << st;
    }
  }
  std::vector<uint8_t> out(4);
  auto st = parquet::decompress_page(7, out.data(), 4, out.data(), out.size());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(st.message()).find("LZ4_RAW"), std::string::npos) << st;
}

Values sample_values(bool with_nulls) {
  Values v;
  const char* words[] = {"alpha", "", "βeta ünïcode", "漢字 😀", "alpha", "tab\tand\nnewline"};
  for (int i = 0; i < 23; ++i) {
    if (with_nulls && (i % 5 == 2 || i == 22)) {
      v.push_back(std::nullopt);
    } else {
      v.push_back(std::string(words[i % 6]) + (i % 3 == 0 ? std::to_string(i) : ""));
    }
  }
  return v;
}

TEST(ParquetTextReader, ReadsEveryCodecEncodingPageVersionAndNulls) {
  for (int codec : {0, 1, 2, 6})
    for (bool dictionary : {false, true})
      for (bool v2 : {false, true})
        for (bool optional : {false, true}) {
          ParquetWriteOptions o;
          o.codec = codec;
          o.dictionary = dictionary;
          o.v2 = v2;
          o.optional = optional;
          o.crc = codec == 1;
          const Values values = sample_values(optional);
          const std::string path = save("matrix.parquet", write_parquet(values, o));
          auto got = read_all(path);
          ASSERT_TRUE(got.ok()) << codec << dictionary << v2 << optional << " " << got.status();
          EXPECT_EQ(*got, values) << codec << dictionary << v2 << optional;
        }
}

TEST(ParquetTextReader, ReadsAColumnOfOtherName) {
  ParquetWriteOptions o;
  o.column = "content";
  const std::string path = save("content.parquet", write_parquet(sample_values(false), o));
  auto got = read_all(path, "content");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, sample_values(false));
  auto missing = read_all(path, "text");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(missing.status().message());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("no top-level column \"text\" (the file's columns: id, content)"), std::string::npos) << msg;
  auto ints = read_all(path, "id");
  ASSERT_FALSE(ints.ok());
  EXPECT_NE(std::string(ints.status().message()).find("column \"id\" holds INT64 values, not strings"),
            std::string::npos) << ints.status();
}

TEST(ParquetTextReader, EveryTruncationIsRefusedNamingTheFile) {
  ParquetWriteOptions o;
  o.codec = 1;
  o.optional = true;
  const std::string whole = write_parquet(sample_values(true), o);
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    const std::string path = save("cut.parquet", whole.substr(0, cut));
    auto got = read_all(path);
    ASSERT_FALSE(got.ok()) << cut;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << cut << " " << got.status();
    EXPECT_EQ(std::string(got.status().message()).rfind(path, 0), 0u) << got.status();
  }
}

TEST(ParquetTextReader, AFlippedByteInAChecksummedPageFailsItsCrc) {
  ParquetWriteOptions o;
  o.crc = true;
  o.rows_per_group = 100;
  o.rows_per_page = 100;
  const Values values(40, std::string("a document of some length"));
  std::string file = write_parquet(values, o);
  const size_t at = file.find("a document");
  ASSERT_NE(at, std::string::npos);
  file[at + 3] ^= 0x20;
  const std::string path = save("crc.parquet", file);
  auto got = read_all(path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(got.status().message()).find("fails its CRC check"), std::string::npos) << got.status();
}

TEST(ParquetTextReader, APageLargerThanTheLimitIsRefusedNotHeld) {
  ParquetWriteOptions o;
  o.rows_per_page = 100;
  const std::string path = save("big.parquet", write_parquet(Values(10, std::string(1000, 'x')), o));
  auto got = read_all(path, "text", 4096);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  auto fits = read_all(path, "text", 20000);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->size(), 10u);
}

TEST(DocumentReaderParquet, NullsAreBadRecordsNamedByRow) {
  ParquetWriteOptions o;
  o.optional = true;
  const Values values = sample_values(true);
  const std::string path = save("nulls.parquet", write_parquet(values, o));
  DocumentReaderOptions ro;
  ro.format = InputFormat::kParquet;
  auto r = DocumentReader::open(path, 0, -1, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  std::string doc;
  ASSERT_TRUE(*(*r)->next(&doc));
  ASSERT_TRUE(*(*r)->next(&doc));
  auto bad = (*r)->next(&doc);  // row 3 is null
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find(path + ": row 3 (row group 1 of 4): the \"text\" value is null"),
            std::string::npos) << bad.status();
  ro.skip_bad = true;
  std::vector<std::string> warnings;
  ro.warn = [&](const std::string& w) { warnings.push_back(w); };
  auto s = DocumentReader::open(path, 0, -1, ro);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::string> docs;
  for (;;) {
    auto got = (*s)->next(&doc);
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    docs.push_back(doc);
  }
  std::vector<std::string> want;
  for (const auto& v : values)
    if (v) want.push_back(*v);
  EXPECT_EQ(docs, want);
  EXPECT_EQ((*s)->skipped(), static_cast<int64_t>(values.size() - want.size()));
  EXPECT_EQ(warnings.size(), values.size() - want.size());
}

TEST(DocumentReaderParquet, ADamagedFileIsLeftOutWholeWithSkip) {
  const std::string path = save("damaged.parquet", "PAR1 this is not the rest of a parquet file");
  DocumentReaderOptions ro;
  ro.format = InputFormat::kParquet;
  auto r = DocumentReader::open(path, 0, -1, ro);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(r.status().message()).find("truncated Parquet file"), std::string::npos) << r.status();
  ro.skip_bad = true;
  auto s = DocumentReader::open(path, 0, -1, ro);
  ASSERT_TRUE(s.ok()) << s.status();
  std::string doc;
  EXPECT_FALSE(*(*s)->next(&doc));
  EXPECT_TRUE((*s)->stream_failed());
}

}  // namespace
}  // namespace vt::data
