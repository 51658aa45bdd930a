// `vtrain prepare`: text files -> a data directory (tokenizer, train/val token shards,
// token_bytes.bin, meta.json). This file owns the options, their command-line parsing, and the
// directory contract below; the loader and the trainer read what it writes.
//
// Data directory:
//   train_000000.bin ...   llm.c shards (shards.h), at most --shard-tokens tokens each
//   val_000000.bin ...     the same for validation (absent when --val-fraction 0)
//   tokenizer.json         the tokenizer (tokenizer.h documents the format)
//   token_bytes.bin        raw little-endian int32 per token id: its byte length (0 for specials);
//                          file size = 4 * vocab_size
//   meta.json              {"format": "vtrain-data", "version": 1, "created_by": "vtrain prepare",
//                           "tokenizer": {"spec", "kind", "vocab_size", "bos_id", "file"},
//                           "token_bytes": "token_bytes.bin", "token_width": 2|4,
//                           "inputs": [...], "documents": n, "input_bytes": n,
//                           "val_fraction": f, "shard_tokens": n,
//                           "train": {"tokens": n, "shards": [names]}, "val": {...}}
// Token stream: the input files in order (a directory contributes its regular files not starting
// with '.', sorted by name), each one document = <|bos|> followed by its encoded bytes.
// Split: with F = --val-fraction > 0, validation is the LAST max(2, ceil(F * N)) tokens of the
// N-token stream and training is the rest; both must hold >= 2 tokens. F = 0: no validation.
// Safety: everything is built in "<out>.prepare-tmp" and moved in at the end (meta.json last), so a
// failure leaves an existing directory as it was. An existing non-empty --out is replaced only if
// its meta.json says it was made by vtrain prepare, or with --force (then only the files named
// above are replaced; other files are left alone).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vt::data {

inline constexpr const char* kMetaFile = "meta.json";
inline constexpr const char* kTokenBytesFile = "token_bytes.bin";

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and/or directories
  std::string out_dir;
  std::string tokenizer = "bytes";  // bytes | bpe:N | tiktoken:FILE
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  bool force = false;
  bool verbose = true;  // progress lines on stdout
};

// Parses the arguments after `vtrain prepare`:
//   --input FILE|DIR [more ...] (repeatable) --out DATADIR --tokenizer SPEC
//   [--val-fraction F] [--shard-tokens N] [--force] [--quiet]
absl::StatusOr<PrepareOptions> parse_prepare_args(const std::vector<std::string>& args);
std::string prepare_usage();

// Runs the whole preparation. Errors name the offending file or option and what to do.
absl::Status prepare_data(const PrepareOptions& opts);

}  // namespace vt::data
