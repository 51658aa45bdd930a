// train/run_progress.h: the smoothed loss against nanochat's formula written out by hand, the
// ETA window (the first steps left out, a moving window), the median, the resume command line
// (flags dropped, quoting a shell reads back), the earlier evaluations a metrics file holds,
// and every field of the summary block.
#include "train/run_progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace vt {
namespace {

TEST(SmoothedLoss, IsNanochatsBiasCorrectedEma) {
  SmoothedLoss s;
  EXPECT_TRUE(std::isnan(s.value()));
  // nanochat base_train.py: smooth = 0.9 smooth + 0.1 loss; debiased = smooth / (1 - 0.9^(n)).
  const double losses[] = {5.0, 4.0, 4.5, 3.0};
  double ema = 0;
  for (int i = 0; i < 4; ++i) {
    ema = 0.9 * ema + 0.1 * losses[i];
    const double want = ema / (1 - std::pow(0.9, i + 1));
    EXPECT_NEAR(s.add(losses[i]), want, 1e-12) << "after " << i + 1 << " losses";
  }
  EXPECT_EQ(s.count(), 4);
  // The first value is the first loss itself (the correction undoes the zero start).
  SmoothedLoss one;
  EXPECT_DOUBLE_EQ(one.add(7.25), 7.25);
  // A constant loss stays that constant.
  SmoothedLoss flat;
  for (int i = 0; i < 30; ++i) flat.add(2.5);
  EXPECT_NEAR(flat.value(), 2.5, 1e-12);
}

TEST(EtaWindow, LeavesOutTheFirstStepsThenUsesTheMeanOfTheWindow) {
  EtaWindow w;
  EXPECT_LT(w.eta(100), 0);
  // The first kSkip steps (slow: allocations, first touches) are not counted.
  for (int i = 0; i < EtaWindow::kSkip; ++i) w.add(100.0);
  EXPECT_LT(w.eta(100), 0);
  w.add(2.0);
  w.add(4.0);
  EXPECT_DOUBLE_EQ(w.eta(10), 30.0);  // mean 3 s x 10 steps
  EXPECT_DOUBLE_EQ(w.eta(0), 0.0);
  // Only the last kWindow steps count: after a slowdown the estimate follows it.
  for (int i = 0; i < EtaWindow::kWindow; ++i) w.add(1.0);
  EXPECT_DOUBLE_EQ(w.eta(7), 7.0);
}

TEST(MedianOf, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({5}), 5);
  EXPECT_TRUE(std::isnan(median_of({})));
}

TEST(ResumeCommandLine, DropsResumeAndStopAtStepAndQuotes) {
  const std::vector<std::string> argv = {"build/vtrain", "train", "--data", "web=a:0.7,code=b:0.3",
                                         "--resume", "none", "--stop-at-step", "20",
                                         "--stop-at-step=5", "--resume=x", "--prompt", "it's here"};
  EXPECT_EQ(resume_command_line(argv, 1),
            "build/vtrain train --data web=a:0.7,code=b:0.3 --prompt 'it'\\''s here' --resume auto");
  EXPECT_EQ(resume_command_line({"vtrain", "train", "--data", "d"}, 4),
            "mpirun -np 4 vtrain train --data d --resume auto");
}

TEST(EarlierEvaluations, ReadsEvaluationRecordsUpToTheStepLastOneWins) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("run_progress_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.jsonl").string();
  {
    std::ofstream f(path);
    f << R"({"step":0,"val_loss":6.0,"val_bpb":3.5,"val_tokens":10})" "\n"
      << R"({"step":5,"loss":4.0,"loss_smooth":4.2})" "\n"
      << "not json\n"
      << R"({"step":10,"val_bpb":3.0})" "\n"
      << R"({"step":10,"val_bpb":2.9})" "\n"   // a resume re-ran step 10
      << R"({"step":20,"val_bpb":2.0})" "\n"   // beyond the checkpoint: not the run's
      << R"({"step":15,"val_bpb":"x"})" "\n";
  }
  const std::vector<EvalPoint> got = earlier_evaluations(path, 15);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step, 0);
  EXPECT_DOUBLE_EQ(got[0].bpb, 3.5);
  EXPECT_EQ(got[1].step, 10);
  EXPECT_DOUBLE_EQ(got[1].bpb, 2.9);
  EXPECT_TRUE(earlier_evaluations((dir / "none.jsonl").string(), 100).empty());
  std::filesystem::remove_all(dir);
}

TEST(FormatRunSummary, NamesEveryFieldOfAFinishedRun) {
  RunSummary s;
  s.first_step = 0;
  s.last_step = 300;
  s.total_steps = 300;
  s.tokens_start = 0;
  s.tokens_end = 614400;
  s.wall_seconds = 252;
  s.tok_per_s = {1000, 3000, 2000};
  s.mfu = {0.01, 0.03, 0.02};
  s.evals = {{0, 3.6}, {150, 2.1}, {300, 2.2}};
  s.checkpoint = "runs/x/ckpt/step_00000300.h5";
  s.ckpt_dir = "runs/x/ckpt";
  s.metrics = "runs/x/metrics.jsonl";
  s.tensorboard = "runs/x/tb";
  s.resume_command = "build/vtrain train --data d --resume auto";
  const std::string out = format_run_summary(s);
  EXPECT_NE(out.find("== run summary: finished, 300 of 300 steps =="), std::string::npos) << out;
  EXPECT_NE(out.find("wall time    4m12s for steps 1-300"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens       614400 in this invocation, 614400 in all"), std::string::npos) << out;
  EXPECT_NE(out.find("median 2.0k tok/s, median MFU 2.00% (over 3 steps)"), std::string::npos) << out;
  EXPECT_NE(out.find("val bpb      final 2.2000 at step 300, best 2.1000 at step 150 (3 evaluations)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint   runs/x/ckpt/step_00000300.h5"), std::string::npos) << out;
  EXPECT_NE(out.find("metrics      runs/x/metrics.jsonl"), std::string::npos) << out;
  EXPECT_NE(out.find("plots        .venv/bin/python launch/plot_run.py runs/x/metrics.jsonl --out runs/x/plots"),
            std::string::npos) << out;
  EXPECT_NE(out.find("tensorboard  .venv/bin/tensorboard --logdir runs/x/tb"), std::string::npos) << out;
  EXPECT_NE(out.find("raise --steps in: build/vtrain train --data d --resume auto"), std::string::npos) << out;
}

TEST(FormatRunSummary, StoppedAndUnresumableRuns) {
  RunSummary s;
  s.stopped = true;
  s.first_step = 100;
  s.last_step = 120;
  s.total_steps = 300;
  s.tokens_start = 1000;
  s.tokens_end = 1200;
  s.wall_seconds = 3.4;
  s.evals = {{50, 2.5}};
  s.earlier_evals = 1;
  s.checkpoint = "c/step_00000120.h5";
  s.ckpt_dir = "c";
  s.resume_command = "vtrain train --resume auto";
  std::string out = format_run_summary(s);
  EXPECT_NE(out.find("== run summary: stopped after step 120 of 300, resumable =="), std::string::npos) << out;
  EXPECT_NE(out.find("wall time    3.4s for steps 101-120"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens       200 in this invocation, 1200 in all"), std::string::npos) << out;
  EXPECT_NE(out.find("(1 evaluation, 1 of them before the resume, from the metrics file)"), std::string::npos) << out;
  EXPECT_NE(out.find("resume       vtrain train --resume auto\n"), std::string::npos) << out;
  EXPECT_NE(out.find("metrics      none"), std::string::npos) << out;
  EXPECT_EQ(out.find("throughput"), std::string::npos) << out;  // no step timed
  EXPECT_EQ(out.find("tensorboard"), std::string::npos) << out;
  // Without --ckpt-dir there is nothing to resume from, and no resume line.
  s.slurm_job = true;  // a Slurm job: submitting it again is the way on
  out = format_run_summary(s);
  EXPECT_NE(out.find("resume       submit the job again (launch/vtrain.sbatch requeues itself"),
            std::string::npos) << out;
  s.stopped = false;
  out = format_run_summary(s);
  EXPECT_NE(out.find("(the run is complete) to train further, submit the job again with a larger --steps"),
            std::string::npos) << out;
  s.slurm_job = false;
  s.ckpt_dir.clear();
  s.checkpoint.clear();
  out = format_run_summary(s);
  EXPECT_NE(out.find("checkpoint   none (no --ckpt-dir): this run cannot be resumed"), std::string::npos) << out;
  EXPECT_EQ(out.find("resume "), std::string::npos) << out;
}

}  // namespace
}  // namespace vt
