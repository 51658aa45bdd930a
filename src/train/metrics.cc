// MetricsLog and the progress line.
#include "train/metrics.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vt {

absl::Status MetricsLog::open(const std::string& path, bool append) {
  if (path.empty()) return absl::OkStatus();
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open metrics file ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

void MetricsLog::write(const nlohmann::json& record) {
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
