// MetricsLog and the progress line.
#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <utility>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file_safety.h"

namespace vt {

absl::Status check_metrics_path(const std::string& path, bool resumes,
                                const std::vector<std::pair<std::string, std::string>>& dirs) {
  if (path.empty()) return absl::OkStatus();
  if (absl::Status st = check_outside(path, "--metrics", dirs); !st.ok()) return st;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();  // made by open()
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics ", path, " exists and is not a regular file; choose a file path"));
  if (st.st_size == 0) return absl::OkStatus();
  if (!resumes)
    return absl::AlreadyExistsError(absl::StrCat(
        "--metrics ", path, " exists and is not empty (", st.st_size, " bytes); a fresh run never "
        "overwrites it: choose another --metrics path, or pass --resume to continue the run that "
        "wrote it (its records are appended to)"));
  std::ifstream in(path, std::ios::binary);
  std::string first;
  std::getline(in, first);
  const nlohmann::json j = nlohmann::json::parse(first, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics ", path, " is not a vtrain metrics file (its first line is not a JSON object "
        "with a \"step\"); a resumed run appends only to its own metrics: choose another path"));
  return absl::OkStatus();
}

namespace {

// Cuts the file `fd` (of `path`) back to its last complete line when its last byte is not a
// newline; says so on stdout. Returns an error only when it cannot read or cut.
absl::Status repair_torn_line(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) return absl::OkStatus();
  char last = '\n';
  if (::pread(fd, &last, 1, st.st_size - 1) != 1)
    return absl::InternalError(absl::StrCat("cannot read --metrics ", path, ": ", std::strerror(errno)));
  if (last == '\n') return absl::OkStatus();
  // Find the last newline, reading backwards in blocks.
  int64_t keep = 0;
  char buf[65536];
  for (int64_t end = st.st_size; end > 0 && keep == 0;) {
    const int64_t start = std::max<int64_t>(0, end - static_cast<int64_t>(sizeof buf));
    const ssize_t n = ::pread(fd, buf, static_cast<size_t>(end - start), start);
    if (n != end - start)
      return absl::InternalError(absl::StrCat("cannot read --metrics ", path, ": ", std::strerror(errno)));
    for (int64_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') {
        keep = start + i + 1;
        break;
      }
    end = start;
  }
  if (::ftruncate(fd, keep) != 0)
    return absl::InternalError(absl::StrCat("cannot repair --metrics ", path, ": ", std::strerror(errno)));
  std::printf("note: --metrics %s ended in a record cut off mid-write (a crash or a full disk): "
              "removed its %lld bytes before appending\n",
              path.c_str(), static_cast<long long>(st.st_size - keep));
  return absl::OkStatus();
}

}  // namespace

absl::Status MetricsLog::open(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open metrics file ", path, ": ", std::strerror(errno)));
  return repair_torn_line(fd_, path);
}

absl::Status MetricsLog::open_tensorboard(const std::string& dir, int64_t first_step,
                                          const std::string& identity) {
  if (dir.empty()) return absl::OkStatus();
  return tb_.open(dir, first_step, identity);
}

void MetricsLog::tensorboard_text(const std::string& tag, const std::string& text, int64_t step) {
  tb_.text(tag, text, step);
}

void MetricsLog::write(const nlohmann::json& record) {
  tb_.scalars(record);
  if (fd_ < 0) return;
  const std::string line = record.dump() + "\n";
  const int err = append_whole(fd_, line);
  if (err == 0) {
    if (record.contains("step") && record["step"].is_number_integer())
      last_step_ = record["step"].get<int64_t>();
    return;
  }
  ::close(fd_);
  fd_ = -1;
  failed_ = true;
  std::fflush(stdout);
  std::fprintf(stderr,
               "vtrain: warning: cannot write --metrics %s: %s%s; the metrics file is closed "
               "and holds the records up to %s (none cut off); training goes on "
               "(docs/usage.md \"When a metrics sink fails\")\n",
               path_.c_str(), std::strerror(err),
               err == ENOSPC || err == EDQUOT ? " (the file system is full)" : "",
               last_step_ >= 0 ? absl::StrCat("step ", last_step_).c_str() : "the start");
  std::fflush(stderr);
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

std::string format_duration(double s) {
  if (s < 0 || s > 1e8) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t % 3600) / 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

std::string progress_line(int64_t step, int64_t total, double loss, double loss_smooth, double lr,
                          double tok_per_s, double mfu, double eta_seconds) {
  std::string tps = tok_per_s >= 1e6   ? absl::StrFormat("%.2fM", tok_per_s / 1e6)
                    : tok_per_s >= 1e3 ? absl::StrFormat("%.1fk", tok_per_s / 1e3)
                                       : absl::StrFormat("%.0f", tok_per_s);
  return absl::StrFormat("step %d/%d | loss %.4f (smoothed %.4f) | lr %.2e | %s tok/s | mfu %.1f%% | eta %s",
                         step, total, loss, loss_smooth, lr, tps, 100.0 * mfu,
                         eta_seconds < 0 ? "(measuring)" : format_duration(eta_seconds));
}

}  // namespace vt
