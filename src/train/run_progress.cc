// The smoothed loss, the ETA window and the run summary (see run_progress.h).
#include "train/run_progress.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "train/metrics.h"

namespace vt {

double SmoothedLoss::add(double loss) {
  ema_ = kBeta * ema_ + (1 - kBeta) * loss;
  decay_ *= kBeta;
  ++n_;
  return value();
}

double SmoothedLoss::value() const {
  if (n_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return ema_ / (1 - decay_);
}

void EtaWindow::add(double step_seconds) {
  if (++seen_ <= kSkip) return;
  window_.push_back(step_seconds);
  sum_ += step_seconds;
  if (static_cast<int>(window_.size()) > kWindow) {
    sum_ -= window_.front();
    window_.pop_front();
  }
}

double EtaWindow::eta(int64_t steps_left) const {
  if (window_.empty()) return -1;
  return sum_ / static_cast<double>(window_.size()) * static_cast<double>(std::max<int64_t>(0, steps_left));
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

namespace {

// A word as a POSIX shell reads it back: as is when it holds only safe characters, else in
// single quotes (a quote inside as '\'').
std::string shell_word(const std::string& w) {
  const bool safe = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./=:,@%+-").find(c) != std::string_view::npos;
  });
  if (safe) return w;
  std::string out = "'";
  for (char c : w) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string rate(double tok_per_s) {
  return tok_per_s >= 1e6   ? absl::StrFormat("%.2fM", tok_per_s / 1e6)
         : tok_per_s >= 1e3 ? absl::StrFormat("%.1fk", tok_per_s / 1e3)
                            : absl::StrFormat("%.0f", tok_per_s);
}

// Seconds with a decimal under a minute, else format_duration's "4m12s" / "2h05m".
std::string wall(double seconds) {
  return seconds < 60 ? absl::StrFormat("%.1fs", seconds) : format_duration(seconds);
}

void line(std::string* out, const char* label, const std::string& text) {
  absl::StrAppendFormat(out, "%-12s %s\n", label, text);
}

}  // namespace

std::vector<EvalPoint> earlier_evaluations(const std::string& metrics_path, int64_t up_to_step) {
  std::map<int64_t, double> by_step;  // the last record of a step wins (a resume re-ran it)
  std::ifstream in(metrics_path);
  std::string text;
  while (std::getline(in, text)) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
        !j.contains("val_bpb") || !j["val_bpb"].is_number())
      continue;
    const int64_t step = j["step"].get<int64_t>();
    if (step <= up_to_step) by_step[step] = j["val_bpb"].get<double>();
  }
  std::vector<EvalPoint> out;
  for (const auto& [step, bpb] : by_step) out.push_back({step, bpb});
  return out;
}

std::string resume_command_line(const std::vector<std::string>& argv, int world_size) {
  std::string out = world_size > 1 ? absl::StrCat("mpirun -np ", world_size, " ") : "";
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--resume" || a == "--stop-at-step") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--resume=", 0) == 0 || a.rfind("--stop-at-step=", 0) == 0) continue;
    absl::StrAppend(&out, i == 0 ? "" : " ", shell_word(a));
  }
  return out + " --resume auto";
}

std::string format_run_summary(const RunSummary& s) {
  std::string out = s.stopped
                        ? absl::StrFormat("== run summary: stopped after step %d of %d, resumable ==\n",
                                          s.last_step, s.total_steps)
                        : absl::StrFormat("== run summary: finished, %d of %d steps ==\n",
                                          s.last_step, s.total_steps);
  const int64_t steps = s.last_step - s.first_step;
  line(&out, "wall time",
       steps > 0 ? absl::StrFormat("%s for steps %d-%d (set-up and evaluations included)",
                                   wall(s.wall_seconds), s.first_step + 1, s.last_step)
                 : absl::StrFormat("%s (no training step in this invocation)", wall(s.wall_seconds)));
  line(&out, "tokens",
       absl::StrFormat("%d in this invocation, %d in all", s.tokens_end - s.tokens_start, s.tokens_end));
  if (!s.tok_per_s.empty())
    line(&out, "throughput",
         absl::StrFormat("median %s tok/s, median MFU %.2f%% (over %d steps)",
                         rate(median_of(s.tok_per_s)), 100.0 * median_of(s.mfu), s.tok_per_s.size()));
  if (s.evals.empty()) {
    line(&out, "val bpb", "no evaluation");
  } else {
    const EvalPoint& last = s.evals.back();
    const EvalPoint& best = *std::min_element(
        s.evals.begin(), s.evals.end(), [](const EvalPoint& a, const EvalPoint& b) { return a.bpb < b.bpb; });
    line(&out, "val bpb",
         absl::StrFormat("final %.4f at step %d, best %.4f at step %d (%d evaluation%s%s)",
                         last.bpb, last.step, best.bpb, best.step, s.evals.size(),
                         s.evals.size() == 1 ? "" : "s",
                         s.earlier_evals > 0
                             ? absl::StrFormat(", %d of them before the resume, from the metrics file",
                                               s.earlier_evals)
                             : ""));
  }
  if (s.ckpt_dir.empty())
    line(&out, "checkpoint", "none (no --ckpt-dir): this run cannot be resumed");
  else
    line(&out, "checkpoint", s.checkpoint.empty() ? absl::StrCat("none complete in ", s.ckpt_dir)
                                                  : s.checkpoint);
  if (s.metrics.empty()) {
    line(&out, "metrics", "none (--metrics FILE keeps every step's numbers)");
  } else {
    line(&out, "metrics", s.metrics);
    std::string dir = std::filesystem::path(s.metrics).parent_path().string();
    const std::string plots = dir.empty() ? "plots" : dir + "/plots";
    line(&out, "plots", absl::StrCat(".venv/bin/python launch/plot_run.py ", shell_word(s.metrics),
                                     " --out ", shell_word(plots)));
  }
  if (!s.tensorboard.empty())
    line(&out, "tensorboard", absl::StrCat(".venv/bin/tensorboard --logdir ", shell_word(s.tensorboard)));
  if (!s.checkpoint.empty() && s.slurm_job) {
    line(&out, "resume", s.stopped ? "submit the job again (launch/vtrain.sbatch requeues itself on "
                                     "the time-limit signal and always passes --resume auto)"
                                   : "(the run is complete) to train further, submit the job again "
                                     "with a larger --steps (VTRAIN_STEPS)");
  } else if (!s.resume_command.empty() && !s.checkpoint.empty()) {
    if (s.stopped)
      line(&out, "resume", s.resume_command);
    else
      line(&out, "resume", absl::StrCat("(the run is complete) to train further, raise --steps in: ",
                                        s.resume_command));
  }
  return out;
}

}  // namespace vt
