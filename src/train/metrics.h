// Training metrics: the JSONL log of docs/design.md "Metrics JSONL" (one object per line: training
// steps and evaluations), written per line so nothing is lost on a crash, the same records as
// TensorBoard scalars with --tensorboard (tensorboard.h), and the human progress line.
// Every write is checked: a record that cannot be written whole (a full disk) is cut back off the
// file, the sink is closed and named once on the console, and training goes on (the policy of
// docs/usage.md "When a metrics sink fails"); a metrics file that ends in a torn line is
// repaired before a resumed run appends to it.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "train/tensorboard.h"

namespace vt {

// Whether --metrics PATH may be written (docs/design.md "Metrics JSONL"): a metrics file that
// exists and is not empty is never truncated: a fresh run (`resumes` false) refuses it, naming
// the file and the ways on (another path, --resume); a resuming run appends to it only when it
// is a vtrain metrics file (its first line a JSON object with an integer "step"). Refused
// always: a path that exists and is not a regular file, and any path inside one of `dirs`
// (directory, the flag that named it: --data, --ckpt-dir, the directory of --resume PATH; empty
// directories are skipped). Empty path: OK. Reads only.
absl::Status check_metrics_path(const std::string& path, bool resumes,
                                const std::vector<std::pair<std::string, std::string>>& dirs);

class MetricsLog {
 public:
  MetricsLog() = default;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // Opens `path` for appending (creating it; check_metrics_path first: a fresh run only ever
  // gets an empty or new file here); empty path: no file. A file whose last line has no newline
  // (a record cut off by a crash or a full disk) is cut back to its last complete line first,
  // with a note naming the bytes dropped.
  absl::Status open(const std::string& path);
  // Also writes every record's numbers to TensorBoard event files in `dir` (tensorboard.h),
  // from `first_step` on (the restart marker), for the run `identity`.
  absl::Status open_tensorboard(const std::string& dir, int64_t first_step,
                                const std::string& identity);
  // A text summary for TensorBoard (the run's configuration); nothing without it.
  void tensorboard_text(const std::string& tag, const std::string& text, int64_t step);
  void write(const nlohmann::json& record);
  // Whether the metrics file was closed after a failed write (it holds the records before it).
  bool metrics_failed() const { return failed_; }
  ~MetricsLog();

 private:
  int fd_ = -1;
  std::string path_;
  bool failed_ = false;
  int64_t last_step_ = -1;  // of the last record written whole
  TensorBoardWriter tb_;
};


// "step 120/500 | loss 3.4521 (smoothed 3.5012) | lr 1.00e-02 | 12.3k tok/s | mfu 21.0% |
// eta 3m12s"; a negative eta prints as "eta (measuring)" (train/run_progress.h EtaWindow).
std::string progress_line(int64_t step, int64_t total, double loss, double loss_smooth, double lr,
                          double tok_per_s, double mfu, double eta_seconds);
std::string format_duration(double seconds);

}  // namespace vt
