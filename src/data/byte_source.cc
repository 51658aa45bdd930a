// ByteSource implementations: plain files (read(2) from an offset), gzip through zlib's inflate
// and zstd through ZSTD_decompressStream, each over a 1 MiB input buffer (see byte_source.h).
#include "data/byte_source.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace vt::data {
namespace {

constexpr size_t kInBuf = 1 << 20;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The raw file: an fd read from a position.
class FileReader {
 public:
  ~FileReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status open(const std::string& path, int64_t offset) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      return absl::NotFoundError(absl::StrCat("cannot open input ", path, ": ", std::strerror(errno)));
    if (offset > 0 && ::lseek(fd_, offset, SEEK_SET) != offset)
      return absl::InternalError(absl::StrCat("cannot seek to byte ", offset, " of ", path));
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> read(char* buf, size_t n) {
    for (;;) {
      const ssize_t r = ::read(fd_, buf, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno != EINTR)
        return absl::DataLossError(absl::StrCat("reading ", path_, " failed: ", std::strerror(errno)));
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
};

class PlainSource final : public ByteSource {
 public:
  absl::Status init(const std::string& path, int64_t offset) {
    path_ = path;
    return file_.open(path, offset);
  }
  absl::StatusOr<size_t> read(char* buf, size_t n) override { return file_.read(buf, n); }

 private:
  FileReader file_;
};

class GzipSource final : public ByteSource {
 public:
  ~GzipSource() override {
    if (inited_) inflateEnd(&zs_);
  }
  absl::Status init(const std::string& path) {
    path_ = path;
    compression_ = Compression::kGzip;
    in_.resize(kInBuf);
    std::memset(&zs_, 0, sizeof(zs_));
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK)
      return absl::InternalError("zlib: inflateInit2 failed");
    inited_ = true;
    return file_.open(path, 0);
  }
  absl::StatusOr<size_t> read(char* buf, size_t n) override {
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out == n) {
      if (zs_.avail_in == 0 && !eof_) {
        auto got = file_.read(in_.data(), in_.size());
        if (!got.ok()) return got.status();
        if (*got == 0) {
          eof_ = true;
        } else {
          zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
          zs_.avail_in = static_cast<uInt>(*got);
        }
      }
      if (zs_.avail_in == 0 && eof_) {
        if (!member_done_)
          return absl::DataLossError(absl::StrCat(path_, ": truncated gzip stream (it ends inside ",
                                                  "a member; was the download cut short?)"));
        break;
      }
      if (member_done_) {  // another member follows (concatenated gzip files)
        if (inflateReset(&zs_) != Z_OK) return absl::InternalError("zlib: inflateReset failed");
        member_done_ = false;
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip stream (zlib: ",
                                                zs_.msg ? zs_.msg : "error", ")"));
      }
    }
    return n - zs_.avail_out;
  }

 private:
  FileReader file_;
  z_stream zs_;
  bool inited_ = false, eof_ = false, member_done_ = true;
  std::vector<char> in_;
};

class ZstdSource final : public ByteSource {
 public:
  ~ZstdSource() override {
    if (ctx_) ZSTD_freeDCtx(ctx_);
  }
  absl::Status init(const std::string& path) {
    path_ = path;
    compression_ = Compression::kZstd;
    in_.resize(kInBuf);
    ctx_ = ZSTD_createDCtx();
    if (ctx_ == nullptr) return absl::InternalError("zstd: cannot create a decompression context");
    return file_.open(path, 0);
  }
  absl::StatusOr<size_t> read(char* buf, size_t n) override {
    ZSTD_outBuffer out = {buf, n, 0};
    while (out.pos == 0) {
      if (in_pos_ == in_len_ && !eof_) {
        auto got = file_.read(in_.data(), in_.size());
        if (!got.ok()) return got.status();
        in_pos_ = 0;
        in_len_ = *got;
        if (*got == 0) eof_ = true;
      }
      if (in_pos_ == in_len_ && eof_) {
        if (pending_ != 0)
          return absl::DataLossError(absl::StrCat(path_, ": truncated zstd stream (it ends inside ",
                                                  "a frame; was the download cut short?)"));
        break;
      }
      ZSTD_inBuffer in = {in_.data(), in_len_, in_pos_};
      const size_t rc = ZSTD_decompressStream(ctx_, &out, &in);
      in_pos_ = in.pos;
      if (ZSTD_isError(rc))
        return absl::DataLossError(absl::StrCat(path_, ": corrupt zstd stream (",
                                                ZSTD_getErrorName(rc), ")"));
      pending_ = rc;  // 0 exactly when a frame is complete
      if (rc == 0 && out.pos == 0 && in_pos_ == in_len_ && eof_) break;
    }
    return out.pos;
  }

 private:
  FileReader file_;
  ZSTD_DCtx* ctx_ = nullptr;
  std::vector<char> in_;
  size_t in_pos_ = 0, in_len_ = 0, pending_ = 0;
  bool eof_ = false;
};

}  // namespace

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "plain";
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
  }
  return "?";
}

absl::StatusOr<Compression> sniff_compression(const std::string& path) {
  FileReader f;
  VT_RETURN_IF_ERROR(f.open(path, 0));
  unsigned char head[4] = {0, 0, 0, 0};
  size_t have = 0;
  while (have < 4) {
    VT_ASSIGN_OR_RETURN(size_t got, f.read(reinterpret_cast<char*>(head) + have, 4 - have));
    if (got == 0) break;
    have += got;
  }
  Compression c = Compression::kNone;
  if (have >= 2 && head[0] == 0x1f && head[1] == 0x8b) c = Compression::kGzip;
  if (have >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd)
    c = Compression::kZstd;
  if (ends_with(path, ".gz") && c != Compression::kGzip)
    return absl::DataLossError(absl::StrCat(path, ": named .gz but not a gzip stream (it does not ",
                                            "start with the gzip magic bytes 1f 8b)"));
  if ((ends_with(path, ".zst") || ends_with(path, ".zstd")) && c != Compression::kZstd)
    return absl::DataLossError(absl::StrCat(path, ": named .zst but not a zstd stream (it does ",
                                            "not start with the zstd magic bytes 28 b5 2f fd)"));
  return c;
}

absl::StatusOr<std::unique_ptr<ByteSource>> ByteSource::open(const std::string& path,
                                                             int64_t offset) {
  VT_ASSIGN_OR_RETURN(Compression c, sniff_compression(path));
  if (c == Compression::kNone) {
    auto s = std::make_unique<PlainSource>();
    VT_RETURN_IF_ERROR(s->init(path, offset));
    return std::unique_ptr<ByteSource>(std::move(s));
  }
  if (offset != 0)
    return absl::InternalError(absl::StrCat(path, ": a compressed stream is read from its start"));
  if (c == Compression::kGzip) {
    auto s = std::make_unique<GzipSource>();
    VT_RETURN_IF_ERROR(s->init(path));
    return std::unique_ptr<ByteSource>(std::move(s));
  }
  auto s = std::make_unique<ZstdSource>();
  VT_RETURN_IF_ERROR(s->init(path));
  return std::unique_ptr<ByteSource>(std::move(s));
}

}  // namespace vt::data
