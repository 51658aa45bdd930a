"""Shared helpers of the cluster tests (tests/cluster): where things are, which training binary
the multi-rank runs launch (the real vtrain or the stand-in), the training arguments, live
progress output, and checks on a run directory (metrics, `latest`, checkpoints, resumes)."""
import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("VTRAIN_BUILD", ROOT / "build"))
VTRAIN = BUILD / "vtrain"
STANDIN_SRC = Path(__file__).resolve().parent / "standin_train.c"
HDF5_MPI_INC = "/usr/include/hdf5/openmpi"
HDF5_MPI_LIB = "/usr/lib/x86_64-linux-gnu/hdf5/openmpi"

# THE SWITCH. Multi-rank runs launch the stand-in (tests/cluster/standin_train.c) until vtrain
# runs multi-rank jobs (--tp/--pp > 1, parallel checkpoint) and saves + exits 75 on SIGUSR1;
# then change "standin" to "vtrain" here (or set VTRAIN_CLUSTER_TRAIN=vtrain to try it).
MULTIRANK_TRAIN = os.environ.get("VTRAIN_CLUSTER_TRAIN", "vtrain")

# A model small enough for a 2-core machine; the stand-in ignores the model flags.
MODEL_ARGS = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "64", "--window", "32",
              "--value", "bov"]
# Slower steps for the real vtrain when a run must still be going when the test signals it.
# (launch/vtrain.sbatch passes --preset tiny itself.)
SLOW_MODEL_ARGS = ["--seq-len", "128"]

_progress_writer = None


def set_progress_writer(fn):
    global _progress_writer
    _progress_writer = fn


def progress(msg):
    """Prints a timestamped progress line at once, past pytest's output capture."""
    line = f"[cluster {time.strftime('%H:%M:%S')}] {msg}"
    if _progress_writer:
        _progress_writer(line)
    else:
        print(line, flush=True)


def tool(name):
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name) if p.exists()), None)


def build_standin(out_dir):
    """Compiles the stand-in with mpicc against the OpenMPI flavour of HDF5; returns its path."""
    out = Path(out_dir) / "standin_train"
    cmd = ["mpicc", "-O2", "-o", str(out), str(STANDIN_SRC), f"-I{HDF5_MPI_INC}",
           f"-L{HDF5_MPI_LIB}", f"-Wl,-rpath,{HDF5_MPI_LIB}", "-lhdf5", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"building the stand-in failed: {' '.join(cmd)}\n{r.stderr}"
    return out


def prepare_data(out_dir):
    """A small byte-tokenized data directory made by the real `vtrain prepare`."""
    assert VTRAIN.exists(), f"{VTRAIN} not found; build vtrain first (VTRAIN_BUILD={BUILD})"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = subprocess.run(["bible", "Gen1:1-Gen12:20"], capture_output=True, text=True).stdout
    assert len(text) > 20_000, "the bible-kjv package is needed (scripts/setup.sh installs it)"
    (out_dir / "corpus.txt").write_text(text)
    data = out_dir / "data"
    r = subprocess.run([str(VTRAIN), "prepare", "--input", str(out_dir / "corpus.txt"), "--out",
                        str(data), "--tokenizer", "bytes", "--val-fraction", "0.1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"vtrain prepare failed:\n{r.stdout}\n{r.stderr}"
    return data


def multirank_bin(standin):
    return str(VTRAIN if MULTIRANK_TRAIN == "vtrain" else standin)


def read_metrics(path):
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    return rows


def train_steps(path):
    return [r["step"] for r in read_metrics(path) if "loss" in r]


def latest_step(ckpt_dir):
    p = Path(ckpt_dir) / "latest"
    if not p.exists():
        return 0
    m = re.fullmatch(r"step_(\d+)\.h5", p.read_text().strip())
    assert m, f"{p} holds {p.read_text()!r}, not a step_NNNNNNNN.h5 name"
    assert (Path(ckpt_dir) / m.group(0)).exists(), f"{p} names a missing checkpoint"
    return int(m.group(1))


def resumes(log_text):
    """[(checkpoint path, step)] of every `resumed from PATH at step N` line."""
    return [(m.group(1), int(m.group(2)))
            for m in re.finditer(r"resumed from (\S+) at step (\d+)", log_text)]


def standin_state(steps):
    """The stand-in's model state after `steps` steps (state = 0.5 * state + step)."""
    s = 0.0
    for k in range(1, steps + 1):
        s = 0.5 * s + k
    return s


def check_checkpoint(ckpt_dir, step, kind):
    """The checkpoint of `step` is complete: HDF5 that opens, with the right step."""
    import h5py
    p = Path(ckpt_dir) / f"step_{step:08d}.h5"
    assert p.exists(), f"{p} is missing"
    assert not Path(f"{p}.tmp").exists(), f"{p}.tmp was left behind"
    if kind == "vtrain":
        r = subprocess.run([str(VTRAIN), "ckpt", "verify", str(p)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, f"vtrain ckpt verify {p} failed:\n{r.stdout}\n{r.stderr}"
    else:
        with h5py.File(p, "r") as f:
            assert int(f.attrs["step"]) == step
            assert float(f.attrs["state"]) == standin_state(step)


def stops(metrics):
    """[(last step logged before a restart, step the restart resumed from)] from the step column
    of a metrics file that restarts appended to (a restart from step r logs r+1 first)."""
    got = train_steps(metrics)
    return [(a, b - 1) for a, b in zip(got, got[1:]) if b <= a]


def check_contiguous_steps(metrics, steps, resumed_at=()):
    """Every step 1..steps logged; a resume from step r may repeat steps after r (work lost since
    the checkpoint) but never skips one."""
    got = train_steps(metrics)
    assert got, f"no training steps in {metrics}"
    assert sorted(set(got)) == list(range(1, steps + 1)), f"steps logged: {got}"
    for r in resumed_at:
        assert r + 1 in got, f"no step {r + 1} after the resume from step {r}"
    return got
