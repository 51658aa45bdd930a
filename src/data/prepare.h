// `vtrain prepare`: a corpus -> a data directory (tokenizer, train/val token shards,
// token_bytes.bin, meta.json), on one process or split over the ranks of an mpirun job. This file
// owns the options, their command-line parsing, and the directory contract below; the loader and
// the trainer read what it writes. corpus.h says which inputs are read and how (files,
// directories, globs, stdin; JSON lines or text; gzip/zstd), document_reader.h what a document
// and a bad record are.
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
//                           "inputs": [...], "input_format", "text_field", "documents": n,
//                           "skipped_records": n, "skipped_files": n, "input_bytes": n,
//                           "text_bytes": n,
//                           "shuffle_seed": s, "tokenizer_sample_bytes": n, "unit_bytes": n,
//                           "val_fraction": f, "shard_tokens": n,
//                           "train": {"tokens": n, "shards": [names]}, "val": {...}}
// Token stream: every document of the inputs in order (files in the order corpus.h gives, records
// in file order), each one <|bos|> followed by its encoded bytes; with --shuffle-seed S != 0 the
// documents are put in the order of a seeded permutation (doc_shuffle.h) first.
// Split: with F = --val-fraction > 0, validation is the LAST max(2, ceil(F * N)) tokens of the
// N-token stream and training is the rest; both must hold >= 2 tokens. F = 0: no validation.
// Tokenizer training (bpe:N) counts the pre-split chunks of a deterministic sample: from each unit
// of work (corpus.h) its leading documents, up to that unit's share (by bytes on disk) of
// --tokenizer-sample-bytes. The sample, and so the tokenizer, does not depend on the rank count.
// Parallel: under `mpirun -np N` the units are split over the ranks (corpus.h), each rank
// tokenizes its units into the scratch directory, then every rank writes a contiguous slice of
// the output documents into the shards. The output is byte for byte the one a single process
// writes. --out must be on a file system every rank sees (as checkpoints need). The scratch
// directory holds the whole token stream once more (and stdin's copy) until the end.
// Safety: everything is built in "<out>.prepare-tmp" and moved in at the end (meta.json last), so a
// failure (a bad record under --on-bad-record fail, a corrupt stream, a full disk) leaves an
// existing directory as it was and nothing half-written. An existing non-empty --out is replaced
// only if its meta.json says it was made by vtrain prepare, or with --force (then only the files
// named above are replaced; other files are left alone). Rank 0 holds an exclusive flock on
// "<out>.prepare-lock" from before the first write to the end, so a second prepare into the same
// --out is refused (naming the first's pid and host) instead of mixing or removing its files.
#pragma once
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/prepare_options.h"

namespace vt::data {

class PrepareGroup;

// Parses the arguments after `vtrain prepare` (prepare_usage() lists them; --help is for the
// caller to check first, core/flags.h wants_help).
absl::StatusOr<PrepareOptions> parse_prepare_args(const std::vector<std::string>& args);
std::string prepare_usage();

// Runs the whole preparation on one process. Errors name the offending file or option and what
// to do.
absl::Status prepare_data(const PrepareOptions& opts);
// The same, collectively over `group` (every rank calls it; the same status on every rank).
absl::Status prepare_data(const PrepareOptions& opts, PrepareGroup& group);

}  // namespace vt::data
