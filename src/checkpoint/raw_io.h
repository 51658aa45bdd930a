// The raw data transfers of checkpoint files (docs/design.md "Checkpoints"): HDF5 describes the
// file (groups, datasets, attributes) and places every dataset's data as one contiguous,
// early-allocated block (h5::Dataset::raw_extent); this file moves the float data itself between
// memory and those blocks with large pwrite/pread calls from a few threads, checksumming each
// chunk while it is in the cache (what is written is exactly what was checksummed; what is read
// back is checksummed as it arrives). A Flusher hands the file's dirty pages to the kernel's
// writeback every few milliseconds while it is written (from a thread of its own, so the writers
// never wait for the disk), so the disk works while the copy goes on and the final fsync is
// short. No HDF5 call is made here (the library is not thread-safe).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/h5_file.h"

namespace vt::ckpt {

// A contiguous run of floats of one dataset: `n` floats at byte `offset` of the file, whose
// first element has global flat index `first` in its dataset (for the checksum), and (writes)
// the memory they come from.
struct RawRun {
  int dataset = 0;  // index into the caller's per-dataset sums
  int64_t offset = 0;
  int64_t first = 0;
  int64_t n = 0;
  const float* data = nullptr;  // writes only
};

// Appends the runs of a local box `data` (row-major, shape box.count) of a dataset of shape
// `global` stored contiguously from byte `base`: one run per row of the box's last dimension,
// adjacent rows merged (a box of whole rows is a single run).
void append_box_runs(std::vector<RawRun>& runs, int dataset, int64_t base, const float* data,
                     const std::vector<int64_t>& global, const h5::Slab& box);

// Threads for the transfers: OMP_NUM_THREADS's team size (the cores this rank is given), 1..8.
int raw_io_threads();

// Writes every run to `fd` (chunks of at most 1 MiB, split over `threads` threads) and adds each
// chunk's checksum terms to sums[run.dataset]. An error names `path` and errno's text.
// `checksum_seconds` (optional) gets the time spent checksumming, summed over the threads.
absl::Status write_runs(int fd, const std::string& path, const std::vector<RawRun>& runs,
                        std::vector<uint64_t>& sums, int threads,
                        double* checksum_seconds = nullptr);

// Reads every run from `fd` (data unused) and adds the checksum terms of what it read to
// sums[run.dataset], its non-finite values to nonfinite[run.dataset]. A short read (a truncated
// file) is an error naming `path`.
absl::Status read_runs(int fd, const std::string& path, const std::vector<RawRun>& runs,
                       std::vector<uint64_t>& sums, std::vector<uint64_t>& nonfinite, int threads);

// Streams a file being written to the disk, then makes it durable: from construction, a thread
// starts the writeback of the file's dirty pages every few milliseconds (sync_file_range, which
// does not wait for the disk); after fsync() it fsyncs the file, and wait() returns that fsync's
// status (an error means the data may not be on the disk). Destroyed without wait(): it stops
// without the fsync (a failed save).
class Flusher {
 public:
  explicit Flusher(std::string path);
  ~Flusher();
  Flusher(const Flusher&) = delete;
  Flusher& operator=(const Flusher&) = delete;
  void fsync();                          // asks for the fsync (returns at once)
  absl::Status wait(double* fsync_seconds = nullptr);  // fsync() and join

 private:
  void run();
  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  enum class Ask { kStream, kFsync, kStop } ask_ = Ask::kStream;
  absl::Status status_;
  double seconds_ = 0;
  std::thread thread_;
};

}  // namespace vt::ckpt
