// ByteSource: the bytes of one `vtrain prepare` input, decompressed while they are read: a plain
// file (optionally from a byte offset), a gzip stream (zlib; concatenated members too) or a zstd
// stream (libzstd; concatenated frames too). The kind is told by the first bytes (gzip 1f 8b,
// zstd 28 b5 2f fd), so a compressed file is never tokenized as text; a name ending in .gz or
// .zst whose bytes are not that kind is refused. Reading is streamed through fixed buffers, so
// memory never grows with the file. A corrupt or truncated stream is an error naming the file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace vt::data {

enum class Compression { kNone, kGzip, kZstd };
const char* compression_name(Compression c);

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Opens `path`. `offset` > 0 starts a plain file there (compressed streams only from 0).
  static absl::StatusOr<std::unique_ptr<ByteSource>> open(const std::string& path,
                                                          int64_t offset = 0);
  // Reads up to n bytes into buf; 0 means the end of the stream. A corrupt stream is an error.
  virtual absl::StatusOr<size_t> read(char* buf, size_t n) = 0;
  Compression compression() const { return compression_; }
  const std::string& path() const { return path_; }

 protected:
  std::string path_;
  Compression compression_ = Compression::kNone;
};

// The kind of a file from its first bytes (a plain file when shorter than a magic number).
absl::StatusOr<Compression> sniff_compression(const std::string& path);

}  // namespace vt::data
