"""A rank that stalls during a checkpoint save ends the job (issue 25, item 7). Two ranks (tp 2)
save every step; once a save has started (its .tmp file exists) rank 1 is stopped with SIGSTOP.
Rank 0 then waits in one of the checkpoint's own collectives (checksums, status agreement,
broadcast), which must run under the communication watchdog: with VTRAIN_COMM_TIMEOUT=8 the job
ends by the watchdog ("stuck for", naming the rank), and no rank process is left behind.
Synchronous saves and --async-save (the writer thread's collectives). What ended the job is
checked, not how long it took (SAFETY_S only keeps a hang from holding the suite)."""
import os
import signal
import subprocess
import time

import pytest
from bible_data import prepare_bible

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
TIMEOUT_S = 8
SAFETY_S = 600


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
             VTRAIN_COMM_TIMEOUT=str(TIMEOUT_S))
    return e


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    return prepare_bible(tmp_path_factory.mktemp("stall"))


def rank_pid(rank, job_pid):
    """The pid of MPI rank `rank` among the descendants of mpirun `job_pid` (by its environment)."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                envs = f.read().split(b"\0")
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if (b"vtrain" in cmd and b"train" in cmd and
                f"OMPI_COMM_WORLD_RANK={rank}".encode() in envs and
                f"VTRAIN_STALL_TEST={job_pid}".encode() in envs):
            return int(p)
    return None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rank_stalled_in_a_save_ends_the_job(datadir, tmp_path, mode):
    ck = tmp_path / "ck"
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", VTRAIN, "train",
           "--data", str(datadir), "--layers", "4", "--dim", "512", "--heads", "4",
           "--seq-len", "64", "--micro-batch", "2", "--steps", "200", "--tp", "2",
           "--ckpt-every", "1", "--keep-last", "2", "--ckpt-dir", str(ck),
           "--final-eval-tokens", "0"] + (["--async-save"] if mode == "async" else [])
    e = env()
    e["VTRAIN_STALL_TEST"] = str(os.getpid())  # marks this job's ranks for rank_pid
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=e, start_new_session=True)
    try:
        # Wait until a save is under way (its temporary file exists), then stop rank 1.
        deadline = time.monotonic() + SAFETY_S
        while time.monotonic() < deadline and not list(ck.glob("*.tmp")):
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.01)
        pid = rank_pid(1, os.getpid())
        assert pid is not None, "rank 1 not found"
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=SAFETY_S)
        print(f"\n[timing] the job ended {time.monotonic() - t0:.1f} s after rank 1 stopped")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the job still ran {SAFETY_S} s after rank 1 stopped:\n{out[-3000:]}")
    assert proc.returncode != 0, out[-3000:]
    assert "stuck for" in out and "rank 0" in out, out[-3000:]
    # The stopped rank went down with the job (once mpirun has reaped it).
    deadline = time.monotonic() + SAFETY_S
    while rank_pid(1, os.getpid()) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rank_pid(1, os.getpid()) is None, "rank 1 outlived the job"
