// PrepareOptions: what `vtrain prepare` was asked to do, and the names of the files it writes
// (prepare.h holds the directory contract and the entry points; prepare_steps.h the collective
// steps, which read these options).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vt::data {

inline constexpr const char* kMetaFile = "meta.json";
inline constexpr const char* kTokenBytesFile = "token_bytes.bin";

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories, globs, "-" (stdin)
  std::string out_dir;
  std::string tokenizer = "bytes";  // bytes | bpe:N | tiktoken:FILE
  std::string format = "auto";      // auto | jsonl | text (corpus.h)
  std::string text_field = "text";  // the JSON field holding a document
  bool skip_bad_records = false;    // --on-bad-record skip|fail
  int64_t max_document_bytes = int64_t{64} << 20;  // longer documents are bad records
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  uint64_t shuffle_seed = 0;        // 0: documents in input order
  int64_t tokenizer_sample_bytes = 2'000'000'000;
  int64_t unit_bytes = 64ll << 20;  // byte ranges of plain JSON-lines files (corpus.h)
  int threads = 0;                  // encoding threads per rank (0: OpenMP's default)
  bool force = false;
  bool verbose = true;  // progress lines on stdout (rank 0)
};

}  // namespace vt::data
