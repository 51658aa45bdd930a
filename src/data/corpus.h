// The corpus of a `vtrain prepare`: which files, in which order, in which format, and how they
// are cut into units of work.
//   Inputs, in the order given: a file; a directory (its regular files not starting with '.',
//   sorted by name); a glob such as 'shards/*.jsonl.zst' (quoted, so that thousands of names do
//   not pass through the shell; matches sorted); or '-' (standard input, copied to a file of the
//   scratch directory first since it is read twice).
//   Format (--format auto|jsonl|text|parquet): auto takes parquet for names ending in .parquet
//   and JSON lines for names ending in .jsonl, .json or .ndjson (both before any .gz/.zst: a
//   compressed Parquet file is refused by the reader) and for stdin, text for everything else.
//   Units: a plain (uncompressed) JSON-lines file longer than unit_bytes is cut into byte ranges of
//   unit_bytes; any other file is one unit. Units depend on the inputs and unit_bytes only, never
//   on the number of ranks; ranks take units by a deterministic greedy balance of their bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/byte_source.h"
#include "data/document_reader.h"

namespace vt::data {

struct InputFile {
  std::string path;
  int64_t bytes = 0;  // on disk (compressed size for compressed files)
  Compression compression = Compression::kNone;
  InputFormat format = InputFormat::kJsonl;
};

struct Unit {
  int file = 0;          // index into the input files
  int64_t begin = 0;     // byte range of a plain file; [0, -1) for a whole file
  int64_t end = -1;
  int64_t weight = 0;    // bytes on disk, for balancing
};

// "auto", "jsonl", "text" or "parquet".
absl::StatusOr<InputFormat> resolve_format(const std::string& name, const std::string& format);

// Expands --input arguments (no '-': the caller replaces stdin with its spooled copy first).
absl::StatusOr<std::vector<InputFile>> list_input_files(const std::vector<std::string>& inputs,
                                                        const std::string& format);

std::vector<Unit> plan_units(const std::vector<InputFile>& files, int64_t unit_bytes);

// Units of `rank` among `ranks` (indices into units, ascending).
std::vector<int> units_of_rank(const std::vector<Unit>& units, int rank, int ranks);

}  // namespace vt::data
