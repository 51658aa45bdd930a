"""launch/vtrain.sbatch and launch/run_local.sh without a cluster: the command lines they build
(ranks per node for GPUs, cores or Slurm tasks, the layout, --resume auto, root flags) through
their dry-run modes, and the errors they give for bad settings. Fast; needs no daemons."""
import os
import subprocess


import cluster_util as cu

SBATCH = cu.ROOT / "launch" / "vtrain.sbatch"
RUN_LOCAL = cu.ROOT / "launch" / "run_local.sh"


def sbatch_dry(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "VTRAIN_"))}
    base.pop("OMP_NUM_THREADS", None)
    base.update(VTRAIN_DRY_RUN="1", VTRAIN_BIN="/bin/true", VTRAIN_DATA=str(tmp_path),
                VTRAIN_RUN_DIR=str(tmp_path / "run"), SLURM_JOB_ID="42", SLURM_JOB_NAME="t")
    base.update({k: str(v) for k, v in env.items()})
    return subprocess.run(["bash", str(SBATCH)], capture_output=True, text=True, env=base, timeout=30)


def command_line(r):
    line = next(l for l in r.stdout.splitlines() if "command:" in l)
    return line.split("command:", 1)[1].split()


def test_sbatch_one_rank_per_gpu(tmp_path):
    r = sbatch_dry(tmp_path, VTRAIN_RANKS_PER_NODE="gpu", SLURM_GPUS_ON_NODE=4, SLURM_JOB_NUM_NODES=2,
                   SLURM_TASKS_PER_NODE="4(x2)", SLURM_CPUS_ON_NODE=32, VTRAIN_TP=4, VTRAIN_PP=2,
                   VTRAIN_STEPS=500, VTRAIN_VALUE="resformer-plus", VTRAIN_PRESET="d12")
    assert r.returncode == 0, r.stdout + r.stderr
    cmd = command_line(r)
    assert cmd[:3] == ["mpirun", "-np", "8"] and "ppr:4:node" in cmd and "--oversubscribe" not in cmd
    assert "OMP_NUM_THREADS=8" in cmd  # 32 CPUs / 4 ranks
    train = cmd[cmd.index("/bin/true"):]
    for flag, val in [("--tp", "4"), ("--pp", "2"), ("--steps", "500"), ("--resume", "auto"),
                      ("--value", "resformer-plus"), ("--preset", "d12"),
                      ("--ckpt-dir", str(tmp_path / "run" / "ckpt"))]:
        assert train[train.index(flag) + 1] == val, (flag, train)
    assert "dp 1 x tp 4 x pp 2" in r.stdout


def test_sbatch_one_rank_per_core_and_extra_args(tmp_path):
    r = sbatch_dry(tmp_path, VTRAIN_RANKS_PER_NODE="core", SLURM_CPUS_ON_NODE=6,
                   SLURM_TASKS_PER_NODE="1", VTRAIN_ARGS="--layers 8 --dim 256",
                   VTRAIN_GLOBAL_BATCH=8192)
    assert r.returncode == 0, r.stdout + r.stderr
    cmd = command_line(r)
    assert cmd[:3] == ["mpirun", "-np", "6"] and "--oversubscribe" in cmd
    assert "OMP_NUM_THREADS=1" in cmd
    assert cmd[-4:] == ["--layers", "8", "--dim", "256"] and "8192" in cmd


def test_sbatch_rejects_bad_settings(tmp_path):
    r = sbatch_dry(tmp_path, SLURM_TASKS_PER_NODE="3", VTRAIN_TP=2)
    assert r.returncode != 0 and "not a multiple of tp*pp" in r.stdout
    r = sbatch_dry(tmp_path, VTRAIN_DATA=tmp_path / "missing")
    assert r.returncode != 0 and "is not a directory" in r.stdout
    r = sbatch_dry(tmp_path, VTRAIN_RANKS_PER_NODE="lots")
    assert r.returncode != 0 and "VTRAIN_RANKS_PER_NODE" in r.stdout


def test_sbatch_dry_run_creates_nothing_and_says_fresh_or_resume(tmp_path):
    # A dry run prints the plan and writes nothing: no run directory, no checkpoint directory.
    run_dir = tmp_path / "run"
    r = sbatch_dry(tmp_path, VTRAIN_CKPT_DIR=tmp_path / "elsewhere" / "ckpt",
                   VTRAIN_METRICS=tmp_path / "m" / "metrics.jsonl")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dry run (VTRAIN_DRY_RUN=1): nothing created, nothing started" in r.stdout, r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    # A fresh start says so; it does not claim to resume from step 0.
    assert "starting fresh: no checkpoint in" in r.stdout and "resuming" not in r.stdout, r.stdout
    r = sbatch_dry(tmp_path)
    assert not run_dir.exists() and "starting fresh" in r.stdout, r.stdout
    # With a checkpoint directory that names its latest checkpoint: the step it resumes from.
    (run_dir / "ckpt").mkdir(parents=True)
    (run_dir / "ckpt" / "latest").write_text("step_00000120.h5\n")
    r = sbatch_dry(tmp_path, VTRAIN_STEPS=500)
    assert f"resuming from step 120 of 500 in {run_dir / 'ckpt'}" in r.stdout, r.stdout
    assert "starting fresh" not in r.stdout
    assert sorted(p.name for p in (run_dir / "ckpt").iterdir()) == ["latest"]


def test_sbatch_asks_for_the_time_limit_signal_and_requeue():
    head = SBATCH.read_text()
    assert "#SBATCH --signal=B:USR1@" in head and "#SBATCH --requeue" in head
    assert "#SBATCH --open-mode=append" in head


def test_run_local_dry_run(tmp_path):
    env = dict(os.environ, VTRAIN_BIN="/bin/true")
    env.pop("OMP_NUM_THREADS", None)
    r = subprocess.run(["bash", str(RUN_LOCAL), "-n", "3", "--dry-run", "train", "--data", "d"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    cmd = r.stderr.split("[run_local]", 1)[1].split()
    assert cmd[:3] == ["mpirun", "-np", "3"] and "--oversubscribe" in cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert cmd[-4:] == ["/bin/true", "train", "--data", "d"]
    r = subprocess.run(["bash", str(RUN_LOCAL), "-n", "0", "train"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 2 and "positive" in r.stderr
