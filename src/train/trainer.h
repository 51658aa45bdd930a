// The training run of `vtrain train` (docs/design.md, "Training loop"): a Trainer sets up the
// layout, device, model, optimizer and data, checks before step 1 what can be checked
// (train/preflight.h), resumes, then steps: forward/backward over the micro-batches, gradient
// sums, a finite check of the loss and gradient norm (train/nonfinite.h) before the optimizer
// touches the weights, metrics and progress, periodic evaluation, CORE, samples and checkpoints.
// At the end it saves the final checkpoint first and evaluates after, so a failing evaluation
// never costs the run's state. A stop request (SIGUSR1/SIGTERM, or --stop-at-step) saves the
// last completed step and ends with kExitRequeue: a signal is read between micro-batches
// (PipelineEngine::set_stop_check) and at every step end, so it is honoured within one
// micro-batch's pass through the pipeline plus the save, however large the step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/communicator.h"
#include "core/op_profile.h"
#include "train/metrics.h"
#include "train/options.h"
#include "train/rank_health.h"
#include "train/run_builder.h"
#include "train/run_progress.h"
#include "train/run_state.h"

namespace vt {

// Exit code of `vtrain train` after a stop request made it save a checkpoint and stop early:
// the run is incomplete and resumes with --resume auto.
inline constexpr int kExitRequeue = 75;

// SIGUSR1/SIGTERM ask a running training to save and stop (exit 75). Installed first thing in
// `vtrain train`, before MPI starts, so an early signal is not fatal.
void install_stop_signal_handlers();

// The stop signal received so far (0: none).
int stop_signal_received();

class GraphMicroSteps;
class GraphOptimizerStep;

class Trainer {
 public:
  // Every rank of `world` (a SelfCommunicator for one process) builds one.
  Trainer(const TrainOptions& options, Communicator* world);
  ~Trainer();

  // The run's objects (build_run: layout, device, model, optimizer, data, checks before step
  // 1), then the resume. Collective; errors are agreed by every rank and nothing is written to
  // --ckpt-dir before they pass.
  absl::Status setup();
  // The steps, then the final checkpoint, evaluation and CORE. Collective. Returns an Aborted
  // status after a stop request saved the run (the caller exits with kExitRequeue).
  absl::Status run();

 private:
  enum class StepOutcome { kApplied, kSkipped, kStopped };
  // The checkpoint --resume names (none, auto: the latest in --ckpt-dir, or a path): the
  // weights, optimizer state, step, tokens and loader position, an evaluation it left pending.
  absl::Status resume();
  absl::Status stop_here(const std::string& why);
  absl::StatusOr<StepOutcome> train_step(int64_t index);
  absl::Status nonfinite_step(int64_t index, double loss, double grad_norm, bool* skip);
  absl::Status evaluate(int64_t step, int64_t max_tokens);
  // "; the checkpoint of step N stays latest" (or that none is complete), for save errors.
  std::string latest_note() const;
  // Refuses a resume on other data than the checkpoint's (its data fingerprint), unless
  // --allow-other-data.
  absl::Status check_same_data(const CheckpointMeta& meta);
  // Rank 0 prints the options that shape the run (batch, seed, schedule) which differ from the
  // checkpoint's run.
  void note_changed_options(const CheckpointMeta& meta) const;
  absl::Status core(int64_t step);
  absl::Status save(int64_t step);
  absl::Status finish_saves();  // waits for a background write; its error, agreed
  void print_banner() const;
  // Rank 0: a line when the data mixture's loader enters another stage (docs/usage.md "Data
  // mixtures"); called after every step.
  void note_data_stage(int64_t done);
  // Rank 0: the summary block at the end of the invocation (run_progress.h).
  void print_summary(bool stopped) const;
  // comm_bytes: what this rank put on the wire during the step (core/communicator.h).
  void log_step(int64_t done, double loss, const optim::StepStats& st, double comm_s,
                double comm_bytes,
                const PipelineEngine::StepTimes& pp);
  void replay_forward(const BlockOutputHook& observer);
  // This step's times into the per-rank health; every --health-every steps the report (rank 0
  // prints stragglers and writes the metrics line). Collective at those steps.
  void check_health(int64_t step, double step_s, double comm_s);
  FetchBatch fetch_from(data::BatchSource& loader);

  TrainOptions o_;  // global_batch completed by build_run
  Communicator* world_;
  bool rank0_ = false;
  std::unique_ptr<Run> run_;  // the run's objects (run_builder.h)
  std::unique_ptr<GraphMicroSteps> graphs_;  // --cuda-graphs micro-step|step, made at the first step
  std::unique_ptr<GraphOptimizerStep> opt_graph_;  // --cuda-graphs step
  std::unique_ptr<RankHealth> health_;
  double data_s_ = 0;  // seconds this step spent reading batches
  SlowRank slow_;      // VTRAIN_INJECT_SLOW_RANK
  MetricsLog metrics_;
  std::string resumed_from_;

  // The state a save writes.
  int64_t completed_step_ = 0;   // steps done (the optimizer step count)
  // An evaluation a stop signal cut short: its step and token budget (-1: none). The checkpoint
  // of that step records it, and a resumed run runs it first.
  int64_t pending_eval_step_ = -1, pending_eval_tokens_ = 0;
  int64_t first_step_ = 0;       // completed_step_ when run() started
  int64_t tokens_seen_ = 0;
  nlohmann::json loader_state_;  // the loader position after completed_step_
  int64_t last_saved_step_ = -1;
  // The newest checkpoint known to be complete on disk (`latest`): last_saved_step_ once its
  // write finished; with --async-save the step whose background write is still running is
  // pending_save_step_ until a wait() returns OK.
  int64_t committed_step_ = -1, pending_save_step_ = -1;

  int64_t nonfinite_in_row_ = 0, skipped_steps_ = 0;
  double t_start_ = 0, t_last_ = 0;
  double t_setup_ = 0;          // when setup() began (the summary's wall time)
  int64_t tokens_at_start_ = 0; // tokens_seen_ when run() started
  SmoothedLoss smooth_loss_;    // rank 0's console and metrics (run_progress.h)
  EtaWindow eta_;
  std::vector<double> step_tok_per_s_, step_mfu_;  // applied steps of this invocation
  std::vector<EvalPoint> evals_;  // completed evaluations (rank 0: the earlier ones on a resume)
  int64_t earlier_evals_ = 0;     // how many of evals_ a resume read from the metrics file
  size_t data_stage_ = 0;       // the mixture's stage after the last step
  double profile_wall_ = 0;    // --profile: wall seconds of the profiled steps
  int64_t profile_steps_ = 0;
  std::unique_ptr<op_profile::DeviceClock> profile_clock_;  // --profile on a GPU: its events
};

// Runs a whole training on every rank of `world`.
absl::Status run_train(const TrainOptions& opts, Communicator* world);

}  // namespace vt
