// What rank 0 tells the user about a run's progress besides the per-step numbers
// (docs/usage.md "The end of a run"): the smoothed training loss beside the raw one, the ETA
// from a moving window of step times, and the summary block `vtrain train` prints when it ends
// (finished, or stopped with a checkpoint). Pure bookkeeping and formatting: the Trainer feeds
// it, nothing here talks to ranks or files.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace vt {

// nanochat's smoothed training loss (scripts/base_train.py): an exponential moving average
// with beta 0.9, divided by 1 - 0.9^n after n values (bias correction, so the first value is
// the first loss, not a tenth of it). It restarts with the process: a resumed run's first step
// is its first value.
class SmoothedLoss {
 public:
  static constexpr double kBeta = 0.9;
  // Adds one step's loss (finite); returns the smoothed loss after it.
  double add(double loss);
  double value() const;  // NaN before the first add
  int64_t count() const { return n_; }

 private:
  double ema_ = 0;
  double decay_ = 1;  // kBeta^n
  int64_t n_ = 0;
};

// The ETA of the steps left, from the mean wall time of the last kWindow steps, leaving out the
// first kSkip steps of the process (allocations, first touches, a cold cache: the first step
// alone took 16x the later ones on the demo). Step times exclude evaluations (the Trainer
// measures each step from the end of what came before it).
class EtaWindow {
 public:
  static constexpr int kSkip = 5;
  static constexpr int kWindow = 50;
  void add(double step_seconds);
  // Seconds for `steps_left` more steps; -1 while no step past the first kSkip was seen.
  double eta(int64_t steps_left) const;

 private:
  int64_t seen_ = 0;
  std::deque<double> window_;
  double sum_ = 0;
};

// One evaluation of the run: step and validation bits per byte (for a mixture: under the
// --data weights, docs/usage.md "Data mixtures").
struct EvalPoint {
  int64_t step = 0;
  double bpb = 0;
};

// Everything the summary block shows; filled by the Trainer.
struct RunSummary {
  bool stopped = false;        // stopped early with a checkpoint (exit 75), else finished
  int64_t first_step = 0;      // completed steps when this invocation started
  int64_t last_step = 0;       // completed steps at the end
  int64_t total_steps = 0;     // --steps
  int64_t tokens_start = 0, tokens_end = 0;
  double wall_seconds = 0;     // this invocation, set-up included
  std::vector<double> tok_per_s, mfu;  // per applied step of this invocation
  std::vector<EvalPoint> evals;        // the run's completed evaluations, oldest first
  int64_t earlier_evals = 0;           // how many of them came from before a resume
  std::string checkpoint;      // the newest complete checkpoint ("" if none)
  std::string ckpt_dir, metrics, tensorboard;  // as given ("" if not)
  std::string resume_command;  // the command line that continues the run ("" if it cannot)
  bool slurm_job = false;      // a Slurm job of several ranks: the advice is to submit it again
};

// The evaluations a metrics file holds for steps up to `up_to_step` (the checkpoint a run resumes:
// its earlier invocations' records; the last record of a step wins, as a resumed run may have
// run it again), by step. A missing or unreadable file, and lines that are not evaluation
// records, give nothing.
std::vector<EvalPoint> earlier_evaluations(const std::string& metrics_path, int64_t up_to_step);

// The summary block: "== run summary" and one labelled line per item (docs/usage.md shows it).
std::string format_run_summary(const RunSummary& s);

// The median of `v` (NaN when empty).
double median_of(std::vector<double> v);

// The command that continues a run: `argv` (the binary and its arguments as given) without any
// --resume and --stop-at-step, with `--resume auto` added, words shell-quoted where needed;
// prefixed with `mpirun -np N` for N > 1 ranks.
std::string resume_command_line(const std::vector<std::string>& argv, int world_size);

}  // namespace vt
