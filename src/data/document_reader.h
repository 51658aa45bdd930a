// DocumentReader: the documents of one unit of `vtrain prepare` input, in order.
//   JSON lines: one record per line, a JSON object whose `text_field` (default "text") is a
//     string; that string (UTF-8) is one document. Blank lines are not records. A unit may be a
//     byte range [begin, end) of a plain file: it owns the lines that START inside the range
//     (the partial line at `begin` belongs to the previous range), so any cut of a file into
//     ranges yields each record exactly once, in file order.
//   text: the whole (decompressed) file is one document.
//   parquet: each row's value in the top-level string column `text_field` is one document
//     (data/parquet_reader.h; a unit is the whole file). A null value, one that is not valid
//     UTF-8 or one longer than max_document_bytes is a bad record, named by row and row group;
//     a damaged file is a corrupt stream (with skip_bad the whole file is left out); a missing
//     or non-string column, or a feature the reader lacks, is an error whatever skip_bad says.
// Bad records (a line that is not JSON, is cut off at the end of the file, holds ill-formed
// UTF-8 or a bad \u escape, is not an object, lacks the text field or has a non-string there)
// and corrupt compressed streams are errors naming the file and the line (1-based, counted from
// the start of the file). With `skip_bad`, a bad record is reported as a warning and left out; a
// corrupt stream ends the unit with stream_failed() set, and the caller leaves out the whole file
// (a gzip stream's CRC vouches for its bytes only at its end).
// A document (a JSON line, or a text file) longer than max_document_bytes is a bad record: it is
// never held whole (its bytes are read past and dropped), so a gzip bomb or a giant record costs
// time, not memory.
// Memory: one read buffer plus the current line (at most max_document_bytes); for parquet, the
// footer, one page as read and as decompressed, and the column chunk's dictionary page and its
// index, each at most max_document_bytes + 16 MiB (a larger page is refused).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/byte_source.h"
#include "data/parquet_reader.h"

namespace vt::data {

enum class InputFormat { kJsonl, kText, kParquet };

struct DocumentReaderOptions {
  InputFormat format = InputFormat::kJsonl;
  std::string text_field = "text";  // JSON field, or parquet column
  bool skip_bad = false;
  // The longest document (bytes of a JSON line, or of a text file) read; longer is a bad record.
  int64_t max_document_bytes = int64_t{64} << 20;
  // Receives each warning (a skipped record or a dropped file tail); may be empty.
  std::function<void(const std::string&)> warn;
};

class DocumentReader {
 public:
  // Reads `path` (any compression; ranges only for plain files). end < 0: to the end.
  static absl::StatusOr<std::unique_ptr<DocumentReader>> open(const std::string& path,
                                                              int64_t begin, int64_t end,
                                                              const DocumentReaderOptions& opts);
  // The next document into *text; false at the end of the unit.
  absl::StatusOr<bool> next(std::string* text);
  int64_t skipped() const { return skipped_; }
  // The (compressed) stream was damaged (only with skip_bad; else next() returned the error).
  bool stream_failed() const { return stream_failed_; }
  // Uncompressed bytes consumed so far (lines including their newline).
  int64_t bytes_read() const { return bytes_read_; }

 private:
  DocumentReader() = default;
  // The next line (without its '\n'); false at the end. *complete: it ended with '\n'.
  // *oversized: the line is longer than max_document_bytes (then *line is empty: its bytes were
  // read past and dropped).
  absl::StatusOr<bool> next_line(std::string* line, bool* complete, bool* oversized);
  std::string too_long() const;
  absl::Status fill();
  // "FILE:LINE" of the unit's local line (1-based); lines before a range are counted on demand.
  std::string where(int64_t local_line) const;
  absl::Status bad(int64_t local_line, const std::string& why);
  absl::Status bad_at(const std::string& where, const std::string& why);
  absl::StatusOr<bool> stream_error(const absl::Status& st);
  // A damaged file: the error, or with skip_bad a warning and the end of the unit.
  absl::StatusOr<bool> file_damaged(const std::string& msg);
  absl::StatusOr<bool> next_parquet(std::string* text);

  std::string path_;
  DocumentReaderOptions opts_;
  std::unique_ptr<ByteSource> src_;
  std::unique_ptr<ParquetTextReader> parquet_;
  int64_t begin_ = 0, end_ = -1;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false, text_done_ = false, dead_ = false, stream_failed_ = false;
  int64_t offset_ = 0;      // absolute (uncompressed) offset of buf_[pos_]
  int64_t line_ = 0;        // lines started so far in this unit
  int64_t first_line_start_ = 0;  // absolute offset of the unit's first line
  int64_t skipped_ = 0, bytes_read_ = 0;
};

}  // namespace vt::data
