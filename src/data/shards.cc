// llm.c token shards: writing (atomic, width chosen from the vocabulary), header validation
// against the file size, and mmap-based reading. Hosts are little-endian, as the format is.
#include "data/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"

namespace vt::data {
namespace {

std::string errno_str() { return std::strerror(errno); }

absl::Status write_all(int fd, const void* data, size_t len, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("writing shard ", path, ": ", errno_str(),
                                              " (is the disk full?)"));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Validates a header already read from a file of `file_size` bytes.
absl::StatusOr<ShardHeader> check_header(const std::string& path, const int32_t* h,
                                         int64_t file_size) {
  ShardHeader out;
  if (h[0] == kShardMagicU16) {
    out.token_width = 2;
  } else if (h[0] == kShardMagicU32) {
    out.token_width = 4;
  } else {
    return absl::DataLossError(absl::StrFormat(
        "%s is not an llm.c token shard: its header does not start with the magic number %d "
        "(uint16 tokens) or %d (uint32 tokens); regenerate it with `vtrain prepare`",
        path, kShardMagicU16, kShardMagicU32));  // the file's own bytes are never printed
  }
  if (h[1] != kShardVersion) {
    return absl::DataLossError(absl::StrFormat(
        "%s: unsupported shard version %d (this reader knows version %d)", path, h[1], kShardVersion));
  }
  if (h[2] < 0) {
    return absl::DataLossError(absl::StrFormat("%s: negative token count %d in the header", path, h[2]));
  }
  out.num_tokens = h[2];
  const int64_t expected = kShardHeaderBytes + out.num_tokens * out.token_width;
  if (file_size < expected) {
    return absl::DataLossError(absl::StrFormat(
        "%s is truncated: the header promises %d tokens (%d bytes) but the file has %d bytes; "
        "the copy or the write was cut short, regenerate or re-copy it",
        path, out.num_tokens, expected, file_size));
  }
  if (file_size > expected) {
    return absl::DataLossError(absl::StrFormat(
        "%s has %d trailing bytes after the %d tokens its header promises; the file is corrupt "
        "or not a single shard",
        path, file_size - expected, out.num_tokens));
  }
  return out;
}

}  // namespace

int shard_token_width(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

absl::Status write_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  if (vocab_size <= 0) return absl::InvalidArgumentError("write_shard: vocab_size must be positive");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "write_shard %s: %d tokens exceed the format's int32 count; use smaller shards", path,
        tokens.size()));
  }
  const int width = shard_token_width(vocab_size);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "write_shard %s: token %d at position %d is outside the vocabulary [0, %d)", path,
          tokens[i], i, vocab_size));
    }
  }
  int32_t header[kShardHeaderInts] = {};
  header[0] = width == 2 ? kShardMagicU16 : kShardMagicU32;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot create shard ", tmp, ": ", errno_str(),
                                            " (does the directory exist and is it writable?)"));
  }
  absl::Status st = write_all(fd, header, sizeof(header), tmp);
  // Convert in blocks so memory stays bounded for large shards.
  constexpr size_t kBlock = 1 << 16;
  std::vector<uint16_t> b16;
  for (size_t i = 0; st.ok() && i < tokens.size(); i += kBlock) {
    const size_t n = std::min(kBlock, tokens.size() - i);
    if (width == 2) {
      b16.resize(n);
      for (size_t j = 0; j < n; ++j) b16[j] = static_cast<uint16_t>(tokens[i + j]);
      st = write_all(fd, b16.data(), n * 2, tmp);
    } else {
      st = write_all(fd, tokens.data() + i, n * 4, tmp);
    }
  }
  if (::close(fd) != 0 && st.ok()) {
    st = absl::InternalError(absl::StrCat("closing shard ", tmp, ": ", errno_str()));
  }
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::InternalError(absl::StrCat("renaming ", tmp, " to ", path, ": ", errno_str()));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

absl::StatusOr<ShardHeader> read_shard_header(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open shard ", path, ": ", errno_str()));
  }
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat shard ", path, ": ", errno_str()));
  }
  if (sb.st_size < kShardHeaderBytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrFormat(
        "%s is truncated: %d bytes, smaller than the %d-byte shard header", path,
        static_cast<int64_t>(sb.st_size), kShardHeaderBytes));
  }
  int32_t h[kShardHeaderInts];
  ssize_t n = ::pread(fd, h, sizeof(h), 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof(h))) {
    return absl::DataLossError(absl::StrCat("cannot read the header of ", path));
  }
  return check_header(path, h, sb.st_size);
}

absl::StatusOr<std::vector<int32_t>> read_shard(const std::string& path) {
  VT_ASSIGN_OR_RETURN(ShardReader r, ShardReader::open(path));
  std::vector<int32_t> out(r.num_tokens());
  r.read(0, r.num_tokens(), out.data());
  return out;
}

absl::StatusOr<ShardReader> ShardReader::open(const std::string& path) {
  VT_ASSIGN_OR_RETURN(ShardHeader h, read_shard_header(path));
  ShardReader r;
  r.path_ = path;
  r.header_ = h;
  r.map_len_ = static_cast<size_t>(kShardHeaderBytes + h.num_tokens * h.token_width);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open shard ", path, ": ", errno_str()));
  void* m = ::mmap(nullptr, r.map_len_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot mmap shard ", path, ": ", errno_str()));
  }
  r.map_ = static_cast<const uint8_t*>(m);
  return r;
}

ShardReader::ShardReader(ShardReader&& o) noexcept { *this = std::move(o); }

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    header_ = o.header_;
    map_ = o.map_;
    map_len_ = o.map_len_;
    o.map_ = nullptr;
    o.map_len_ = 0;
  }
  return *this;
}

ShardReader::~ShardReader() { release(); }

void ShardReader::release() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_len_);
  map_ = nullptr;
  map_len_ = 0;
}

void ShardReader::read(int64_t offset, int64_t count, int32_t* out) const {
  VT_CHECK(offset >= 0 && count >= 0 && offset + count <= header_.num_tokens);
  if (count == 0) return;  // `out` may be null (an empty vector's data())
  const uint8_t* base = map_ + kShardHeaderBytes;
  if (header_.token_width == 2) {
    const uint8_t* p = base + offset * 2;
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    }
  } else {
    std::memcpy(out, base + offset * 4, static_cast<size_t>(count) * 4);
  }
}

absl::Status ShardReader::check_ids(int64_t vocab_size) const {
  const uint8_t* base = map_ + kShardHeaderBytes;
  const int64_t n = header_.num_tokens;
  // The first offending offset over all threads (chunks are scanned in parallel; the minimum
  // makes the message independent of the thread count).
  int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (int64_t c = 0; c < n; c += kCheckChunk) {
    const int64_t end = std::min(n, c + kCheckChunk);
    for (int64_t i = c; i < end && i < first; ++i) {
      int64_t v;
      if (header_.token_width == 2) {
        uint16_t u;
        std::memcpy(&u, base + 2 * i, 2);
        v = u;
      } else {
        uint32_t u;
        std::memcpy(&u, base + 4 * i, 4);
        v = u;
      }
      if (v >= vocab_size) {
        first = i;
        break;
      }
    }
  }
  if (first == n) return absl::OkStatus();
  int32_t id = 0;
  read(first, 1, &id);
  return absl::DataLossError(absl::StrFormat(
      "shard %s: token id %d at offset %d is outside the vocabulary [0, %d); the shard was made "
      "with another tokenizer or is corrupt; re-run vtrain prepare",
      path_, static_cast<uint32_t>(id), first, vocab_size));
}

}  // namespace vt::data
