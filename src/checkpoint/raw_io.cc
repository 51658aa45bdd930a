// Threaded pwrite/pread of checkpoint data with checksums beside (see raw_io.h).
#include "checkpoint/raw_io.h"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkpoint/checksum.h"

namespace vt::ckpt {

namespace {

constexpr int64_t kChunkFloats = int64_t{1} << 18;  // 1 MiB: large writes, still in the L2 cache
constexpr auto kStreamEvery = std::chrono::milliseconds(10);  // hand dirty pages to writeback

// The runs cut into chunks of at most kChunkFloats.
std::vector<RawRun> chunks_of(const std::vector<RawRun>& runs) {
  std::vector<RawRun> out;
  for (const RawRun& r : runs)
    for (int64_t k = 0; k < r.n; k += kChunkFloats) {
      RawRun c = r;
      c.n = std::min(kChunkFloats, r.n - k);
      c.offset = r.offset + 4 * k;
      c.first = r.first + k;
      if (r.data) c.data = r.data + k;
      out.push_back(c);
    }
  return out;
}

// Runs `body(chunk, thread)` over every chunk on `threads` threads (this one among them); the
// first error stops the others and is returned.
template <class Body>
absl::Status for_chunks(const std::vector<RawRun>& chunks, int threads, Body body) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
  auto work = [&](int t) {
    for (size_t i = next++; i < chunks.size() && !failed; i = next++) {
      absl::Status st = body(chunks[i], t);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = st;
        failed = true;
      }
    }
  };
  threads = std::max(1, std::min<int>(threads, static_cast<int>(chunks.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  return first_error;
}

std::string errno_text(int e) { return absl::StrCat(std::strerror(e), " (errno ", e, ")"); }

}  // namespace

void append_box_runs(std::vector<RawRun>& runs, int dataset, int64_t base, const float* data,
                     const std::vector<int64_t>& global, const h5::Slab& box) {
  const int nd = static_cast<int>(global.size());
  auto add = [&](int64_t first, int64_t n, const float* p) {
    if (n == 0) return;
    if (!runs.empty()) {
      RawRun& last = runs.back();
      if (last.dataset == dataset && last.first + last.n == first && last.data + last.n == p) {
        last.n += n;  // the next row continues this run in the file and in memory
        return;
      }
    }
    runs.push_back({dataset, base + 4 * first, first, n, p});
  };
  if (nd == 0) {
    add(0, 1, data);
    return;
  }
  const int64_t run = box.count[nd - 1];
  int64_t outer = 1;
  for (int d = 0; d + 1 < nd; ++d) outer *= box.count[d];
  if (run == 0 || outer == 0) return;
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * global[d + 1];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, g = box.start[nd - 1];
    for (int d = nd - 2; d >= 0; --d) {
      g += (box.start[d] + rem % box.count[d]) * stride[d];
      rem /= box.count[d];
    }
    add(g, run, data + o * run);
  }
}

int raw_io_threads() { return std::clamp(omp_get_max_threads(), 1, 8); }

absl::Status write_runs(int fd, const std::string& path, const std::vector<RawRun>& runs,
                        std::vector<uint64_t>& sums, int threads, double* checksum_seconds) {
  const std::vector<RawRun> chunks = chunks_of(runs);
  threads = std::max(1, threads);
  std::vector<double> summing(threads, 0.0);
  std::vector<std::vector<uint64_t>> part(threads, std::vector<uint64_t>(sums.size(), 0));
  absl::Status st = for_chunks(chunks, threads, [&](const RawRun& c, int t) -> absl::Status {
    const char* p = reinterpret_cast<const char*>(c.data);
    int64_t left = 4 * c.n, off = c.offset;
    while (left > 0) {
      const ssize_t w = ::pwrite(fd, p, static_cast<size_t>(left), off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return absl::InternalError(absl::StrCat("cannot write ", path, " at byte ", off, ": ",
                                                errno_text(w < 0 ? errno : ENOSPC)));
      p += w;
      off += w;
      left -= w;
    }
    const auto t0 = std::chrono::steady_clock::now();
    part[t][c.dataset] += checksum_run(c.data, c.first, c.n, /*threads=*/false);
    summing[t] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return absl::OkStatus();
  });
  for (const auto& p : part)
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += p[i];
  if (checksum_seconds)
    for (double s : summing) *checksum_seconds += s;
  return st;
}

absl::Status read_runs(int fd, const std::string& path, const std::vector<RawRun>& runs,
                       std::vector<uint64_t>& sums, std::vector<uint64_t>& nonfinite, int threads) {
  const std::vector<RawRun> chunks = chunks_of(runs);
  threads = std::max(1, threads);
  std::vector<std::vector<uint64_t>> psum(threads, std::vector<uint64_t>(sums.size(), 0));
  std::vector<std::vector<uint64_t>> pbad(threads, std::vector<uint64_t>(sums.size(), 0));
  std::vector<std::vector<float>> buf(threads);
  absl::Status st = for_chunks(chunks, threads, [&](const RawRun& c, int t) -> absl::Status {
    std::vector<float>& b = buf[t];
    b.resize(static_cast<size_t>(c.n));
    char* p = reinterpret_cast<char*>(b.data());
    int64_t left = 4 * c.n, off = c.offset;
    while (left > 0) {
      const ssize_t r = ::pread(fd, p, static_cast<size_t>(left), off);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        return absl::DataLossError(absl::StrCat("cannot read ", path, " at byte ", off, ": ",
                                                errno_text(errno)));
      if (r == 0)
        return absl::DataLossError(absl::StrCat(path, " ends at byte ", off, ", inside the data of "
                                                "a dataset (truncated file?)"));
      p += r;
      off += r;
      left -= r;
    }
    psum[t][c.dataset] += checksum_run(b.data(), c.first, c.n, /*threads=*/false);
    uint64_t bad = 0;
    for (int64_t k = 0; k < c.n; ++k) bad += !std::isfinite(b[k]);
    pbad[t][c.dataset] += bad;
    return absl::OkStatus();
  });
  for (int t = 0; t < threads; ++t)
    for (size_t i = 0; i < sums.size(); ++i) {
      sums[i] += psum[t][i];
      nonfinite[i] += pbad[t][i];
    }
  return st;
}

Flusher::Flusher(std::string path) : path_(std::move(path)) {
  thread_ = std::thread([this] { run(); });
}

Flusher::~Flusher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ask_ == Ask::kStream) ask_ = Ask::kStop;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Flusher::fsync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ask_ = Ask::kFsync;
  }
  cv_.notify_all();
}

absl::Status Flusher::wait(double* fsync_seconds) {
  fsync();
  if (thread_.joinable()) thread_.join();
  if (fsync_seconds) *fsync_seconds = seconds_;
  return status_;
}

void Flusher::run() {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW);
  if (fd < 0) {
    status_ = absl::InternalError(absl::StrCat("cannot open ", path_, ": ", errno_text(errno)));
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (ask_ == Ask::kStream) {
    lock.unlock();
    // Starts the writeback of every dirty page of the file not yet under it. It may wait while
    // the device's queue is full: this thread waits, not the writers.
    ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    lock.lock();
    cv_.wait_for(lock, kStreamEvery, [this] { return ask_ != Ask::kStream; });
  }
  const bool sync = ask_ == Ask::kFsync;
  lock.unlock();
  if (sync) {
    const auto t0 = std::chrono::steady_clock::now();
    if (::fsync(fd) != 0)
      status_ = absl::InternalError(absl::StrCat("cannot flush ", path_, " to the disk: ", errno_text(errno)));
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ::close(fd);
}

}  // namespace vt::ckpt
