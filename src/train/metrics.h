// Training metrics: the JSONL log of docs/design.md "Metrics JSONL" (one object per line: training
// steps and evaluations), flushed per line so nothing is lost on a crash, the same records as
// TensorBoard scalars with --tensorboard (tensorboard.h), and the human progress line.
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
  // Opens `path` for appending (creating it; check_metrics_path first: a fresh run only ever
  // gets an empty or new file here); empty path: no file.
  absl::Status open(const std::string& path);
  // Also writes every record's numbers to TensorBoard event files in `dir` (tensorboard.h).
  absl::Status open_tensorboard(const std::string& dir);
  // A text summary for TensorBoard (the run's configuration); nothing without it.
  void tensorboard_text(const std::string& tag, const std::string& text, int64_t step);
  void write(const nlohmann::json& record);
  ~MetricsLog();

 private:
  std::FILE* f_ = nullptr;
  TensorBoardWriter tb_;
};

// "step 120/500 | loss 3.4521 | lr 1.00e-02 | 12.3k tok/s | mfu 21.0% | eta 3m12s"
std::string progress_line(int step, int total, double loss, double lr_mult, double tok_per_s,
                          double mfu, double eta_seconds);
std::string format_duration(double seconds);

}  // namespace vt
