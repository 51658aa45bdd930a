// Training metrics: the JSONL log of docs/design.md "Metrics JSONL" (one object per line: training
// steps and evaluations), flushed per line so nothing is lost on a crash, and the human progress
// line.
#pragma once
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vt {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Appends to `path` (creating it); empty path: no file.
  absl::Status open(const std::string& path, bool append);
  void write(const nlohmann::json& record);
  ~MetricsLog();

 private:
  std::FILE* f_ = nullptr;
};

// "step 120/500 | loss 3.4521 | lr 1.00e-02 | 12.3k tok/s | mfu 21.0% | eta 3m12s"
std::string progress_line(int step, int total, double loss, double lr_mult, double tok_per_s,
                          double mfu, double eta_seconds);
std::string format_duration(double seconds);

}  // namespace vt
