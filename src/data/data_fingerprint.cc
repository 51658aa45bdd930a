// data_fingerprint (see data_fingerprint.h).
#include "data/data_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vt::data {

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL, kFnvPrime = 1099511628211ULL;
constexpr int kBlocks = 16;
constexpr size_t kBlockBytes = 4096;

struct Fnv {
  uint64_t h = kFnvOffset;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * kFnvPrime;
  }
  void add_u64(uint64_t v) { add(&v, sizeof v); }
  void add_str(const std::string& s) {
    add_u64(s.size());
    add(s.data(), s.size());
  }
};

// Adds the file's size and the sampled blocks (the whole file when it is small).
absl::Status add_file(Fnv& f, const std::string& path, bool whole) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat("cannot open ", path, " for the data fingerprint: ",
                                            std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  f.add_u64(size);
  std::string buf(kBlockBytes, '\0');
  auto read_at = [&](uint64_t off, size_t n) -> absl::Status {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return absl::DataLossError(absl::StrCat("cannot read ", path, " at ", off));
      got += static_cast<size_t>(r);
    }
    f.add(buf.data(), n);
    return absl::OkStatus();
  };
  absl::Status s;
  if (whole || size <= kBlocks * kBlockBytes) {
    for (uint64_t off = 0; off < size && s.ok(); off += kBlockBytes)
      s = read_at(off, static_cast<size_t>(std::min<uint64_t>(kBlockBytes, size - off)));
  } else {
    const uint64_t last = size - kBlockBytes;
    for (int i = 0; i < kBlocks && s.ok(); ++i) s = read_at(last * i / (kBlocks - 1), kBlockBytes);
  }
  ::close(fd);
  return s;
}

}  // namespace

absl::StatusOr<std::string> data_fingerprint(const std::string& tokenizer_path,
                                             const std::vector<std::string>& train_shards) {
  Fnv f;
  if (absl::Status s = add_file(f, tokenizer_path, /*whole=*/true); !s.ok()) return s;
  f.add_u64(train_shards.size());
  for (const std::string& p : train_shards) {
    f.add_str(std::filesystem::path(p).filename().string());
    if (absl::Status s = add_file(f, p, /*whole=*/false); !s.ok()) return s;
  }
  return absl::StrFormat("v1:%016x", f.h);
}

}  // namespace vt::data
