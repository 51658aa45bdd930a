// Fuzz target: a Parquet file as `vtrain prepare` reads its text column (data/parquet_reader.h):
// the footer, the schema search, every row group's chunk and its pages (decompression, levels,
// dictionary indices, PLAIN values), through ParquetTextReader and through DocumentReader (UTF-8
// and length checks on top). Seeds: files of every codec, encoding and page version from the
// tests' writer (tests/support/parquet_writer.h).
#include <string_view>

#include "../support/parquet_writer.h"
#include "data/document_reader.h"
#include "data/parquet_reader.h"
#include "fuzz_util.h"

using namespace vt;

namespace {
// A declared row count is honoured (2^31 null rows in one RLE run are valid): bound the rows
// read per input so that one input cannot run for minutes.
constexpr int kMaxRows = 1 << 16;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    std::vector<std::optional<std::string>> values;
    for (int i = 0; i < 20; ++i)
      values.push_back(i % 7 == 3 ? std::nullopt : std::optional<std::string>("doc " + std::to_string(i % 6)));
    int k = 0;
    for (int codec : {0, 1, 2, 6})
      for (bool dictionary : {false, true})
        for (bool v2 : {false, true}) {
          test::ParquetWriteOptions o;
          o.codec = codec;
          o.dictionary = dictionary;
          o.v2 = v2;
          o.optional = (k % 2) == 0;
          o.crc = (k % 3) == 0;
          auto vals = values;
          if (!o.optional)
            for (auto& v : vals)
              if (!v) v = "";
          fuzz::write_text(dir + "/seed" + std::to_string(k++) + ".parquet", test::write_parquet(vals, o));
        }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = (fuzz::scratch() / "in.parquet").string();
  fuzz::write_bytes(path, data, size);
  auto reader = data::ParquetTextReader::open(path, "text", 1 << 20);
  if (reader.ok()) {
    for (int i = 0; i < kMaxRows; ++i) {
      std::string_view v;
      bool null = false;
      auto got = (*reader)->next(&v, &null);
      if (!got.ok() || !*got) break;
      if (!null && v.data() == nullptr && !v.empty()) std::abort();
    }
  }
  data::DocumentReaderOptions o;
  o.format = data::InputFormat::kParquet;
  o.max_document_bytes = 1 << 16;
  auto docs = data::DocumentReader::open(path, 0, -1, o);
  if (!docs.ok()) return 0;
  std::string doc;
  for (int i = 0; i < kMaxRows; ++i) {
    auto got = (*docs)->next(&doc);
    if (!got.ok() || !*got) break;
  }
  return 0;
}
