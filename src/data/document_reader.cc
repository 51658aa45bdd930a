// DocumentReader (see document_reader.h): line splitting over a ByteSource with byte ranges,
// JSON record parsing (nlohmann::json validates UTF-8 and escapes), parquet rows through
// ParquetTextReader (UTF-8 checked here), bad-record reporting.
#include "data/document_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/check.h"
#include "nlohmann/json.hpp"

namespace vt::data {
namespace {

constexpr size_t kReadBytes = 1 << 20;
// A parquet page may hold one document of max_document_bytes plus this much (other values,
// lengths, levels); a larger page is refused.
constexpr int64_t kParquetPageSlack = int64_t{16} << 20;

// Newlines in bytes [0, end) of a plain file: the line number where a range starts.
int64_t count_newlines(const std::string& path, int64_t end) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::vector<char> buf(kReadBytes);
  int64_t n = 0, at = 0;
  while (at < end) {
    const ssize_t r = ::read(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(buf.size(), end - at)));
    if (r <= 0) break;
    n += std::count(buf.data(), buf.data() + r, '\n');
    at += r;
  }
  ::close(fd);
  return n;
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Well-formed UTF-8 as RFC 3629 defines it (no overlong forms, surrogates or code points past
// U+10FFFF), the rule nlohmann::json applies to JSON strings.
bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (int i = 2; i <= n; ++i)
      if ((p[i] & 0xc0) != 0x80) return false;
    p += n + 1;
  }
  return true;
}

const char* json_type(const nlohmann::json& v) {
  return v.is_number() ? "a number" : v.is_boolean() ? "a boolean" : v.is_null() ? "null"
       : v.is_array()  ? "an array" : v.is_object() ? "an object" : "not a string";
}

}  // namespace

absl::StatusOr<std::unique_ptr<DocumentReader>> DocumentReader::open(
    const std::string& path, int64_t begin, int64_t end, const DocumentReaderOptions& opts) {
  std::unique_ptr<DocumentReader> r(new DocumentReader());
  r->path_ = path;
  r->opts_ = opts;
  r->begin_ = begin;
  r->end_ = end;
  if (opts.format == InputFormat::kParquet) {  // always the whole file
    auto pq = ParquetTextReader::open(path, opts.text_field, opts.max_document_bytes + kParquetPageSlack);
    if (pq.ok()) {
      r->parquet_ = std::move(*pq);
    } else if (pq.status().code() == absl::StatusCode::kDataLoss) {
      VT_RETURN_IF_ERROR(r->file_damaged(std::string(pq.status().message())).status());
    } else {
      return pq.status();
    }
    return r;
  }
  const int64_t start = begin > 0 ? begin - 1 : 0;
  VT_ASSIGN_OR_RETURN(r->src_, ByteSource::open(path, start));
  r->offset_ = start;
  if (begin > 0) {
    // Drop the tail of the line that started before the range (up to and including its '\n').
    for (;;) {
      const size_t nl = r->buf_.find('\n', r->pos_);
      if (nl != std::string::npos) {
        r->offset_ += static_cast<int64_t>(nl + 1 - r->pos_);
        r->pos_ = nl + 1;
        break;
      }
      r->offset_ += static_cast<int64_t>(r->buf_.size() - r->pos_);
      r->pos_ = r->buf_.size();
      if (r->eof_) break;
      VT_RETURN_IF_ERROR(r->fill());
    }
  }
  r->first_line_start_ = r->offset_;
  return r;
}

absl::Status DocumentReader::fill() {
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buf_.size();
  buf_.resize(old + kReadBytes);
  absl::StatusOr<size_t> got = src_->read(buf_.data() + old, kReadBytes);
  buf_.resize(old + (got.ok() ? *got : 0));
  if (!got.ok()) return got.status();
  if (*got == 0) eof_ = true;
  return absl::OkStatus();
}

std::string DocumentReader::where(int64_t local_line) const {
  const int64_t base = first_line_start_ > 0 ? count_newlines(path_, first_line_start_) : 0;
  return absl::StrCat(path_, ":", base + local_line);
}

absl::Status DocumentReader::bad(int64_t local_line, const std::string& why) {
  return bad_at(where(local_line), why);
}

absl::Status DocumentReader::bad_at(const std::string& where, const std::string& why) {
  const std::string msg = absl::StrCat(where, ": ", why);
  if (!opts_.skip_bad)
    return absl::InvalidArgumentError(absl::StrCat(
        msg, "; fix or remove that record, or pass --on-bad-record skip to leave such records out"));
  ++skipped_;
  if (opts_.warn) opts_.warn(absl::StrCat("skipped ", msg));
  return absl::OkStatus();
}

std::string DocumentReader::too_long() const {
  return absl::StrCat("longer than --max-document-bytes ", opts_.max_document_bytes,
                      " bytes (raise it for longer documents)");
}

absl::StatusOr<bool> DocumentReader::next_line(std::string* line, bool* complete, bool* oversized) {
  *oversized = false;
  for (;;) {
    if (end_ >= 0 && offset_ >= end_) return false;  // the next line belongs to the next range
    const size_t nl = buf_.find('\n', pos_);
    if (static_cast<int64_t>((nl == std::string::npos ? buf_.size() : nl) - pos_) >
        opts_.max_document_bytes) {
      // Too long to hold: read past it to its newline (or the end), keeping nothing.
      *oversized = true;
      line->clear();
      for (;;) {
        const size_t e = buf_.find('\n', pos_);
        if (e != std::string::npos) {
          offset_ += static_cast<int64_t>(e + 1 - pos_);
          pos_ = e + 1;
          *complete = true;
          return true;
        }
        offset_ += static_cast<int64_t>(buf_.size() - pos_);
        pos_ = buf_.size();
        if (eof_) {
          *complete = false;
          return true;
        }
        absl::Status st = fill();
        if (!st.ok()) return stream_error(st);
      }
    }
    if (nl != std::string::npos) {
      line->assign(buf_, pos_, nl - pos_);
      offset_ += static_cast<int64_t>(nl + 1 - pos_);
      pos_ = nl + 1;
      *complete = true;
      return true;
    }
    if (eof_) {
      if (pos_ == buf_.size()) return false;
      line->assign(buf_, pos_, std::string::npos);
      offset_ += static_cast<int64_t>(buf_.size() - pos_);
      pos_ = buf_.size();
      *complete = false;
      return true;
    }
    absl::Status st = fill();
    if (!st.ok()) return stream_error(st);
  }
}

absl::StatusOr<bool> DocumentReader::stream_error(const absl::Status& st) {
  // A damaged stream cannot vouch for any of its bytes (gzip checks its CRC only at the end), so
  // with skip the whole file is left out; the caller drops what it already took from it.
  return file_damaged(absl::StrCat(st.message(), " (detected after line ", line_, ")"));
}

absl::StatusOr<bool> DocumentReader::file_damaged(const std::string& msg) {
  if (!opts_.skip_bad)
    return absl::DataLossError(absl::StrCat(
        msg, "; replace the file, or pass --on-bad-record skip to leave this file out"));
  if (opts_.warn) opts_.warn(absl::StrCat(msg, "; the whole file is left out"));
  dead_ = true;
  stream_failed_ = true;
  return false;
}

absl::StatusOr<bool> DocumentReader::next_parquet(std::string* text) {
  for (;;) {
    std::string_view v;
    bool null = false;
    absl::StatusOr<bool> got = parquet_->next(&v, &null);
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kDataLoss)
        return file_damaged(std::string(got.status().message()));
      return got.status();
    }
    if (!*got) return false;
    std::string why;
    if (null) {
      why = absl::StrCat("the \"", opts_.text_field, "\" value is null, not a string");
    } else if (static_cast<int64_t>(v.size()) > opts_.max_document_bytes) {
      why = absl::StrCat("the document is ", too_long());
    } else if (!valid_utf8(v)) {
      why = absl::StrCat("the \"", opts_.text_field, "\" value is not valid UTF-8");
    } else {
      text->assign(v);
      bytes_read_ += static_cast<int64_t>(v.size());
      return true;
    }
    VT_RETURN_IF_ERROR(bad_at(parquet_->where(), why));
  }
}

absl::StatusOr<bool> DocumentReader::next(std::string* text) {
  if (dead_) return false;
  if (opts_.format == InputFormat::kParquet) return next_parquet(text);
  if (opts_.format == InputFormat::kText) {
    if (text_done_) return false;
    text_done_ = true;
    while (!eof_) {
      absl::Status st = fill();
      if (!st.ok()) return stream_error(st);
      if (static_cast<int64_t>(buf_.size() - pos_) > opts_.max_document_bytes) {
        // The file is one document and too long to hold: refused, or left out without reading
        // it into memory (the rest is read past to see the stream is sound).
        const std::string why = absl::StrCat("the file is one document (text format), ", too_long());
        if (!opts_.skip_bad)
          return absl::InvalidArgumentError(absl::StrCat(
              path_, ": ", why, "; split it, or pass --on-bad-record skip to leave it out"));
        while (!eof_) {
          buf_.clear();
          pos_ = 0;
          absl::Status st2 = fill();
          if (!st2.ok()) return stream_error(st2);
        }
        buf_.clear();
        pos_ = 0;
        ++skipped_;
        if (opts_.warn) opts_.warn(absl::StrCat("skipped ", path_, ": ", why));
        return false;
      }
    }
    text->assign(buf_, pos_, std::string::npos);
    bytes_read_ += static_cast<int64_t>(text->size());
    buf_.clear();
    pos_ = 0;
    return true;
  }
  std::string line;
  for (;;) {
    bool complete = false, oversized = false;
    const int64_t at = offset_;
    VT_ASSIGN_OR_RETURN(bool got, next_line(&line, &complete, &oversized));
    if (!got) return false;
    ++line_;
    bytes_read_ += oversized ? offset_ - at : static_cast<int64_t>(line.size()) + (complete ? 1 : 0);
    if (oversized) {
      VT_RETURN_IF_ERROR(bad(line_, absl::StrCat("the record is ", too_long())));
      continue;
    }
    if (blank(line)) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      std::string why = e.what();
      const size_t p = why.find("] ");
      if (p != std::string::npos) why = why.substr(p + 2);
      why = absl::StrReplaceAll(why, {{"at line 1, column", "at column"}});
      if (!complete) why = absl::StrCat("truncated JSON record (the file ends inside it): ", why);
      VT_RETURN_IF_ERROR(bad(line_, absl::StrCat("not a valid JSON record: ", why)));
      continue;
    }
    if (!j.is_object()) {
      VT_RETURN_IF_ERROR(bad(line_, absl::StrCat("the record is ", json_type(j), ", not a JSON object")));
      continue;
    }
    auto it = j.find(opts_.text_field);
    if (it == j.end()) {
      VT_RETURN_IF_ERROR(bad(line_, absl::StrCat("the record has no \"", opts_.text_field,
                                                 "\" field (choose the field with --text-field)")));
      continue;
    }
    if (!it->is_string()) {
      VT_RETURN_IF_ERROR(bad(line_, absl::StrCat("the \"", opts_.text_field, "\" field is ",
                                                 json_type(*it), ", not a string")));
      continue;
    }
    *text = std::move(it->get_ref<std::string&>());
    return true;
  }
}

}  // namespace vt::data
