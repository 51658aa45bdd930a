// MetricsLog and the progress line.
#include "train/metrics.h"

#include <sys/stat.h>

#include <cerrno>
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
  for (const auto& [dir, flag] : dirs)
    if (!dir.empty() && is_inside(path, dir))
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics ", path, " is inside the ", flag, " directory ", dir, "; vtrain never writes "
          "a metrics file among its data or checkpoints: choose a path outside it"));
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

absl::Status MetricsLog::open(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  f_ = std::fopen(path.c_str(), "a");
  if (!f_)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open metrics file ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status MetricsLog::open_tensorboard(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  return tb_.open(dir);
}

void MetricsLog::tensorboard_text(const std::string& tag, const std::string& text, int64_t step) {
  tb_.text(tag, text, step);
}

void MetricsLog::write(const nlohmann::json& record) {
  tb_.scalars(record);
  if (!f_) return;
  std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

std::string format_duration(double s) {
  if (s < 0 || s > 1e8) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t % 3600) / 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

std::string progress_line(int step, int total, double loss, double lr, double tok_per_s,
                          double mfu, double eta_seconds) {
  std::string tps = tok_per_s >= 1e6   ? absl::StrFormat("%.2fM", tok_per_s / 1e6)
                    : tok_per_s >= 1e3 ? absl::StrFormat("%.1fk", tok_per_s / 1e3)
                                       : absl::StrFormat("%.0f", tok_per_s);
  return absl::StrFormat("step %d/%d | loss %.4f | lr %.2e | %s tok/s | mfu %.1f%% | eta %s", step,
                         total, loss, lr, tps, 100.0 * mfu, format_duration(eta_seconds));
}

}  // namespace vt
