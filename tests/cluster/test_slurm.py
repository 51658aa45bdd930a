"""A real single-node Slurm on this machine running launch/vtrain.sbatch: starts Debian's munged,
slurmctld and slurmd from a generated munge key and slurm.conf in a temp dir (plugins that need
nothing special: proctrack/linuxproc, task/none, no accounting), submits short training runs
with sbatch, and checks their output and checkpoints, a change of layout between two runs on one
checkpoint directory, and the time-limit path: `scancel --signal=USR1 --batch` (what
`--signal=B:USR1@120` does before the limit) -> checkpoint -> `scontrol requeue` -> the job runs
again and resumes from the latest checkpoint to completion; then the same cycle set off by a real
one-minute time limit. The daemons and every process started under this cluster are always torn
down.

Multi-rank runs launch cluster_util.MULTIRANK_TRAIN (the real build/vtrain unless
VTRAIN_CLUSTER_TRAIN says otherwise); the requeue tests whose signal must land mid-run use the
paced stand-in (standin_train.c), and the real vtrain's requeue has its own test."""
import re
import time
from pathlib import Path

import pytest

import cluster_util as cu
import slurm_cluster as sc
from slurm_cluster import assert_completed, finished, vtrain_knobs


@pytest.fixture(scope="module")
def slurm(need_root, tmp_path_factory):
    sc.skip_unless_installed()
    cluster = sc.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_srun_steps_launch(slurm):
    """slurmd launches job steps (what mpirun uses to start its daemons on other nodes)."""
    r = slurm.run("srun", "--ntasks=2", "--time=1", "hostname", timeout=60)
    assert len(r.stdout.split()) == 2, r.stdout + r.stderr


def test_short_run_real_vtrain(slurm, datadir, tmp_path):
    """The real vtrain under sbatch: one rank today (cluster_util.MULTIRANK_TRAIN for more)."""
    run = tmp_path / "short"
    job, log = slurm.submit(run, 1, vtrain_knobs(datadir, 20, 10, VTRAIN_BIN=cu.VTRAIN))
    info = slurm.wait(job, finished, log=log)
    text = assert_completed(info, log)
    assert "--resume auto" in text and re.search(r"step 20/20 \| loss", text), text[-3000:]
    cu.check_contiguous_steps(run / "metrics.jsonl", 20)
    assert cu.latest_step(run / "ckpt") == 20
    cu.check_checkpoint(run / "ckpt", 20, "vtrain")
    cu.check_checkpoint(run / "ckpt", 10, "vtrain")


def test_multirank_runs_and_layout_change(slurm, datadir, standin, tmp_path):
    """Two ranks as tp=2, then the same checkpoint directory continued as dp=2 (tp=1) with more
    steps: the second job resumes from the first one's last checkpoint."""
    kind, binary = cu.MULTIRANK_TRAIN, cu.multirank_bin(standin)
    run = tmp_path / "layout"
    # The same global batch on both layouts (2 micro-batches of 2 rows at tp=2, 1 each at dp=2).
    knobs = vtrain_knobs(datadir, 10, 5, VTRAIN_BIN=binary, VTRAIN_TP=2, STANDIN_STEP_MS=50,
                         VTRAIN_GLOBAL_BATCH=256)
    job, log = slurm.submit(run, 2, knobs)
    text = assert_completed(slurm.wait(job, finished, log=log), log)
    assert "dp 1 x tp 2 x pp 1" in text, text[-3000:]
    assert cu.latest_step(run / "ckpt") == 10
    knobs.update(VTRAIN_TP=1, VTRAIN_STEPS=20)
    job, log = slurm.submit(run, 2, knobs)
    text = assert_completed(slurm.wait(job, finished, log=log), log)
    assert "dp 2 x tp 1 x pp 1" in text and "resuming from step 10 of 20" in text, text[-3000:]
    assert [s for _, s in cu.resumes(text)] == [10], text[-3000:]
    cu.check_contiguous_steps(run / "metrics.jsonl", 20, resumed_at=[10])
    cu.check_checkpoint(run / "ckpt", 20, kind)


def test_requeue_on_time_limit_signal_resumes(slurm, datadir, standin, tmp_path):
    """The signal the time limit sends: vtrain saves at its current step and exits 75, the script
    requeues, Slurm starts the job again and it resumes from that checkpoint: no step lost.
    Runs the stand-in, whose steps are paced (STANDIN_STEP_MS) so the signal always lands
    mid-run; the real vtrain's requeue is test_requeue_real_vtrain_resumes_from_latest."""
    kind, binary = "standin", standin
    run = tmp_path / "requeue"
    knobs = vtrain_knobs(datadir, 40, 10, VTRAIN_BIN=binary, STANDIN_STEP_MS=250)
    job, log = slurm.submit(run, 2, knobs)
    signalled_at, info = sc.signal_and_wait_requeue(slurm, job, log, run / "metrics.jsonl", 13)
    text = assert_completed(info, log)
    assert "got SIGUSR1" in text and f"requeueing job {job}" in text, text[-4000:]
    res = cu.resumes(text)
    assert len(res) == 1, text[-4000:]
    path, step = res[0]
    assert Path(path).name == f"step_{step:08d}.h5"
    # The save on the signal happens at the end of the step in flight: nothing is lost.
    assert step >= signalled_at, (signalled_at, step)
    assert cu.train_steps(run / "metrics.jsonl") == list(range(1, 41)), "a step was lost or redone"
    assert cu.latest_step(run / "ckpt") == 40
    cu.check_checkpoint(run / "ckpt", 40, kind)


def test_requeue_real_vtrain_resumes_from_latest(slurm, datadir, tmp_path):
    """The real vtrain (two ranks) with the same script: on SIGUSR1 it saves the step in flight
    and exits 75, the script requeues, and the job resumes at exactly that step."""
    run = tmp_path / "requeue_vtrain"
    knobs = vtrain_knobs(datadir, 120, 20, model_args=cu.SLOW_MODEL_ARGS, VTRAIN_BIN=cu.VTRAIN)
    job, log = slurm.submit(run, 2, knobs)  # two ranks: the signal reaches both through mpirun
    signalled_at, info = sc.signal_and_wait_requeue(slurm, job, log, run / "metrics.jsonl", 25)
    text = assert_completed(info, log)
    res = cu.resumes(text)
    assert len(res) == 1, text[-4000:]
    step = res[0][1]
    # vtrain saves on the signal at the end of the step in flight: every step exactly once.
    assert not cu.stops(run / "metrics.jsonl"), "a step was redone after the requeue"
    assert step >= signalled_at
    assert cu.train_steps(run / "metrics.jsonl") == list(range(1, 121))
    cu.check_checkpoint(run / "ckpt", 120, "vtrain")


def test_time_limit_signal_requeues_and_resumes(slurm, datadir, standin, tmp_path):
    """The real time-limit path: --time=2 with --signal=B:USR1@90 (overriding the script's @120,
    which a two-minute job would get at once). Slurm signals the batch shell 30-60 s in (its timer
    checks about every 30 s: with one minute and @45 a loaded machine missed the window); the job
    saves, requeues itself and resumes at the saved step. Cancelled once it runs again (the
    scancel test above covers running to completion after a requeue)."""
    binary = standin  # paced steps: the time limit must arrive mid-run (see the test above)
    run = tmp_path / "timelimit"
    knobs = vtrain_knobs(datadir, 1000, 50, VTRAIN_BIN=binary, STANDIN_STEP_MS=200)
    job, log = slurm.submit(run, 2, knobs, "--time=2", "--signal=B:USR1@90")
    slurm.wait(job, sc.requeued, timeout=180, log=log)
    deadline = time.time() + 60
    while time.time() < deadline and not cu.resumes(Path(log).read_text(errors="replace")):
        time.sleep(0.5)
    text = Path(log).read_text(errors="replace")
    slurm.run("scancel", job)
    slurm.wait(job, finished, log=log)
    assert "got SIGUSR1" in text and f"requeueing job {job}" in text, text[-4000:]
    saved = re.search(r"mpirun exited with 75; latest checkpoint: step (\d+)", text)
    assert saved, text[-4000:]
    res = cu.resumes(text)
    assert res and res[0][1] == int(saved.group(1)) > 0, text[-4000:]
    cu.progress(f"time limit: saved at step {saved.group(1)}, requeued, resumed there")
