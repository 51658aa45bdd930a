// The last step of `vtrain prepare` (prepare_steps.h): the token stream is the output documents
// in order (document i of the output is source document perm.at(i), doc_shuffle.h), each
// <|bos|> + its tokens. Rank r of W writes output documents [D*r/W, D*(r+1)/W): it sums their
// lengths, learns where its slice starts from the others, then copies the documents out of the
// scratch files (memory-mapped) into the shards with pwrite. Rank 0 creates every shard (header,
// final size) first. The bytes written depend only on the stream, never on W.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "data/doc_shuffle.h"
#include "data/prepare_steps.h"
#include "data/shards.h"

namespace vt::data {
namespace fs = std::filesystem;
namespace {

// A read-only mapping of a whole scratch file (empty files map to nothing).
struct Mapping {
  const uint8_t* data = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), len);
  }
  absl::Status open(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot open scratch file ", p.string(), ": ", std::strerror(errno)));
    struct stat sb;
    ::fstat(fd, &sb);
    len = static_cast<size_t>(sb.st_size);
    if (len > 0) {
      void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
      if (m == MAP_FAILED) {
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot map scratch file ", p.string()));
      }
      data = static_cast<const uint8_t*>(m);
    }
    ::close(fd);
    return absl::OkStatus();
  }
};

class Scratch {
 public:
  Scratch(const PrepareContext& ctx, const std::vector<UnitStats>& stats) : ctx_(ctx) {
    prefix_.assign(stats.size() + 1, 0);
    for (size_t u = 0; u < stats.size(); ++u) prefix_[u + 1] = prefix_[u] + stats[u].docs;
    tok_.resize(stats.size());
    idx_.resize(stats.size());
  }
  int64_t docs() const { return prefix_.back(); }
  // Source document g: its tokens' bytes.
  absl::StatusOr<std::pair<const uint8_t*, int64_t>> doc(int64_t g, int width) {
    const int u = static_cast<int>(std::upper_bound(prefix_.begin(), prefix_.end(), g) - prefix_.begin()) - 1;
    const int64_t j = g - prefix_[u];
    if (!idx_[u]) {
      idx_[u] = std::make_unique<Mapping>();
      tok_[u] = std::make_unique<Mapping>();
      VT_RETURN_IF_ERROR(idx_[u]->open(ctx_.unit_path(u, "idx")));
      VT_RETURN_IF_ERROR(tok_[u]->open(ctx_.unit_path(u, "tok")));
      if (idx_[u]->len != static_cast<size_t>(prefix_[u + 1] - prefix_[u]) * 8)
        return absl::DataLossError(absl::StrCat("scratch index of unit ", u, " has the wrong size"));
    }
    const int64_t* ends = reinterpret_cast<const int64_t*>(idx_[u]->data);
    const int64_t begin = j > 0 ? ends[j - 1] : 0, end = ends[j];
    VT_CHECK(static_cast<size_t>(end) * width <= tok_[u]->len);
    return std::make_pair(tok_[u]->data + begin * width, end - begin);
  }

 private:
  const PrepareContext& ctx_;
  std::vector<int64_t> prefix_;
  std::vector<std::unique_ptr<Mapping>> tok_, idx_;
};

// Writes consecutive stream tokens starting at a position into the shard files.
class StreamWriter {
 public:
  StreamWriter(const PrepareContext& ctx, const SplitPlan& plan, int width, int64_t start)
      : ctx_(ctx), plan_(plan), width_(width), pos_(start) {}
  ~StreamWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status append(const uint8_t* bytes, int64_t tokens) {
    buf_.insert(buf_.end(), bytes, bytes + tokens * width_);
    if (buf_.size() >= (8u << 20)) return flush();
    return absl::OkStatus();
  }
  absl::Status flush() {
    size_t done = 0;
    while (done < buf_.size()) {
      const int64_t S = ctx_.opts->shard_tokens;
      const bool train = pos_ < plan_.n_train;
      const int64_t q = train ? pos_ : pos_ - plan_.n_train;
      const int64_t k = q / S;
      const int64_t split_len = train ? plan_.n_train : plan_.n_val;
      const int64_t shard_end = std::min(split_len, (k + 1) * S);
      const std::string& name = train ? plan_.train_shards.at(k) : plan_.val_shards.at(k);
      if (name != fd_name_) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = ::open((ctx_.tmp / name).c_str(), O_WRONLY | O_CLOEXEC);
        if (fd_ < 0) return absl::InternalError(absl::StrCat("cannot open shard ", name, ": ", std::strerror(errno)));
        fd_name_ = name;
      }
      const int64_t n = std::min<int64_t>(shard_end - q, static_cast<int64_t>(buf_.size() - done) / width_);
      const char* p = reinterpret_cast<const char*>(buf_.data() + done);
      size_t left = static_cast<size_t>(n * width_);
      off_t at = static_cast<off_t>(kShardHeaderBytes + (q - k * S) * width_);
      while (left > 0) {
        const ssize_t w = ::pwrite(fd_, p, left, at);
        if (w < 0) {
          if (errno == EINTR) continue;
          return absl::InternalError(absl::StrCat("writing shard ", name, ": ", std::strerror(errno),
                                                  " (is the disk full?)"));
        }
        p += w;
        at += w;
        left -= static_cast<size_t>(w);
      }
      done += static_cast<size_t>(n * width_);
      pos_ += n;
    }
    buf_.clear();
    return absl::OkStatus();
  }

 private:
  const PrepareContext& ctx_;
  const SplitPlan& plan_;
  int width_;
  int64_t pos_;
  std::vector<uint8_t> buf_;
  int fd_ = -1;
  std::string fd_name_;
};

// Rank 0: every shard file with its header, at its final size.
absl::Status create_shards(const PrepareContext& ctx, const SplitPlan& plan, int width) {
  const int64_t S = ctx.opts->shard_tokens;
  auto make = [&](const std::vector<std::string>& names, int64_t total) -> absl::Status {
    for (size_t k = 0; k < names.size(); ++k) {
      const int64_t n = std::min<int64_t>(S, total - static_cast<int64_t>(k) * S);
      int32_t header[kShardHeaderInts] = {};
      header[0] = width == 2 ? kShardMagicU16 : kShardMagicU32;
      header[1] = kShardVersion;
      header[2] = static_cast<int32_t>(n);
      const fs::path p = ctx.tmp / names[k];
      const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      bool ok = fd >= 0 && ::pwrite(fd, header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) &&
                ::ftruncate(fd, static_cast<off_t>(kShardHeaderBytes + n * width)) == 0;
      if (fd >= 0) ok = ::close(fd) == 0 && ok;
      if (!ok) return absl::InternalError(absl::StrCat("cannot create shard ", p.string(), ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  };
  VT_RETURN_IF_ERROR(make(plan.train_shards, plan.n_train));
  return make(plan.val_shards, plan.n_val);
}

}  // namespace

absl::Status write_shards(const PrepareContext& ctx, const std::vector<UnitStats>& stats,
                          const Tokenizer& tok, const SplitPlan& plan) {
  const int width = shard_token_width(tok.vocab_size());
  const int32_t bos = tok.bos_id();
  uint8_t bos_bytes[4];
  if (width == 2) {
    const uint16_t b = static_cast<uint16_t>(bos);
    std::memcpy(bos_bytes, &b, 2);
  } else {
    std::memcpy(bos_bytes, &bos, 4);
  }
  Scratch scratch(ctx, stats);
  const int64_t D = scratch.docs();
  const DocPermutation perm(D, ctx.opts->shuffle_seed);
  const int W = ctx.group->size(), r = ctx.group->rank();
  const int64_t lo = D * r / W, hi = D * (r + 1) / W;

  absl::Status st = ctx.rank0() ? create_shards(ctx, plan, width) : absl::OkStatus();
  int64_t mine = 0;
  for (int64_t i = lo; i < hi && st.ok(); ++i) {
    auto d = scratch.doc(perm.at(i), width);
    if (!d.ok()) st = d.status();
    else mine += 1 + d->second;
  }
  VT_RETURN_IF_ERROR(ctx.group->agree(st));  // also: the shards exist before anyone writes
  const std::vector<int64_t> counts = ctx.group->all_gather({mine});
  int64_t start = 0;
  for (int k = 0; k < r; ++k) start += counts[k];
  StreamWriter out(ctx, plan, width, start);
  for (int64_t i = lo; i < hi && st.ok(); ++i) {
    auto d = scratch.doc(perm.at(i), width);
    if (!d.ok()) {
      st = d.status();
      break;
    }
    st = out.append(bos_bytes, 1);
    if (st.ok()) st = out.append(d->first, d->second);
  }
  if (st.ok()) st = out.flush();
  return ctx.group->agree(st);
}

}  // namespace vt::data
