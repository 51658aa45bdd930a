"""A failure on one rank ends the whole MPI job within a bounded time, with a message naming the
rank and the reason: exceptions and error statuses (run_guarded), input only one rank sees
(all_ok), crashes (signal handlers), a rank that diverges (communication watchdog) and a rank
killed from outside (mpirun itself). Runs build/fault_demo under mpirun with 3 ranks.

"Bounded" is checked by what ended the job, not by a stopwatch (a busy machine stretches any
time): the communication watchdog stays at its 300 s default (300 s for vtrain), so a job that
an error did not end would run into it and print "stuck for N s"; every failure test asserts
that no rank was stuck. SAFETY_S only keeps a broken build from hanging the suite. The seconds
each job took are printed ([timing])."""
import os
import re
import signal
import subprocess
import time

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
DEMO = os.path.join(BUILD, "fault_demo")
NP = 3
SAFETY_S = 900  # a job still running after this is killed and the test fails (a hang)
WATCHDOG_S = 10  # VTRAIN_COMM_TIMEOUT of the watchdog tests


def env(**extra):
    e = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
             OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    e.pop("VTRAIN_COMM_TIMEOUT", None)
    e.update(extra)
    return e


def start(args, np=NP, **extra):
    assert os.path.exists(DEMO), f"{DEMO} is missing: build the fault_demo target"
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np), DEMO,
           *map(str, args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", env=env(**extra), start_new_session=True)


def finish(proc, t0, timeout):
    """Waits for mpirun; on timeout kills its whole session (no stray ranks) and fails."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"job still running after {timeout} s:\n{out}\n{err}")
    return proc.returncode, out, err, time.monotonic() - t0


def read_pids(pid_dir, np=NP, timeout=SAFETY_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [pid_dir / f"rank_{r}.pid" for r in range(np)]
        if all(f.exists() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    pytest.fail("the ranks did not all start")


def assert_gone(pids, timeout=SAFETY_S):
    """No rank process outlives the job."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if os.path.exists(f"/proc/{p}") and
                 not open(f"/proc/{p}/stat").read().split(")")[-1].split()[0] == "Z"]
        time.sleep(0.1)
    assert not alive, f"rank processes {alive} still running after the job ended"


def run_demo(tmp_path, *args, timeout=SAFETY_S, **extra):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    t0 = time.monotonic()
    proc = start([*args, "--pid-dir", pid_dir], **extra)
    rc, out, err, dt = finish(proc, t0, timeout)
    pids = [int(f.read_text()) for f in pid_dir.glob("rank_*.pid")]
    assert_gone(pids)
    print(f"\n[timing] fault_demo {' '.join(map(str, args))}: rc={rc} in {dt:.2f} s")
    return rc, out, err, dt


def test_ok_exits_zero(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "ok")
    assert rc == 0, err
    assert f"fault_demo: ok after 5 steps on {NP} ranks" in out
    assert "vtrain:" not in err


@pytest.mark.parametrize("victim", [0, 2])
def test_exception_on_one_rank_aborts_the_job(tmp_path, victim):
    rc, out, err, dt = run_demo(tmp_path, "throw-on-rank", victim)
    assert rc != 0
    assert f"vtrain: rank {victim}: uncaught exception: injected failure at step 2" in err, err
    assert "stuck for" not in err, err  # ended by the abort, not the watchdog


def test_error_status_on_one_rank_aborts_the_job(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "error-on-rank", 1)
    assert rc != 0
    assert "vtrain: rank 1: error: injected error status at step 2" in err, err
    assert "stuck for" not in err, err


def test_bad_input_on_one_rank_is_agreed_and_exits_cleanly(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "bad-input-on-rank", 1)
    assert rc == 2, err
    msg = "vtrain: error: rank 1: data file /nonexistent/vtrain-demo/train_000.bin not found"
    assert err.count(msg) == 1, err  # printed once (rank 0), same on every rank
    assert "MPI_ABORT" not in err and "MPI_Abort" not in err, err  # a clean exit, no abort
    assert "stuck for" not in err, err


def test_segfault_on_one_rank_names_the_rank_and_signal(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "segv-on-rank", 1)
    assert rc != 0
    assert "vtrain: rank 1: crashed with signal 11 (SIGSEGV" in err, err
    assert re.search(r"rank 1 with PID \d+ on node \S+ exited on signal 11", err), err
    assert "stuck for" not in err, err


def test_failed_check_on_one_rank_names_the_rank_and_signal(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "check-on-rank", 2)
    assert rc != 0
    assert "vtrain internal error at" in err and "injected invariant failure" in err, err
    assert "vtrain: rank 2: crashed with signal 6 (SIGABRT" in err, err
    assert "stuck for" not in err, err


def test_rank_that_skips_a_collective_trips_the_watchdog(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "hang-on-rank", 1, VTRAIN_COMM_TIMEOUT=str(WATCHDOG_S))
    assert rc != 0
    stuck = re.findall(r"vtrain: rank (\d+): stuck for (\d+) s in all-reduce on the world group "
                       r"\(a peer rank probably died or diverged\); aborting", err)
    assert stuck, err
    assert all(int(r) != 1 for r, _ in stuck), err  # the waiting ranks report, not the diverged one
    assert all(int(s) >= WATCHDOG_S for _, s in stuck), err  # not before its timeout
    assert dt >= WATCHDOG_S


def test_rank_that_never_exits_trips_the_watchdog_in_finalize(tmp_path):
    rc, out, err, dt = run_demo(tmp_path, "hang-at-exit-on-rank", 1,
                                VTRAIN_COMM_TIMEOUT=str(WATCHDOG_S))
    assert rc != 0
    stuck = re.findall(r"vtrain: rank (\d+): stuck for (\d+) s in finalize on the world group", err)
    assert stuck and all(r != "1" for r, _ in stuck), err
    assert all(int(s) >= WATCHDOG_S for _, s in stuck), err
    assert dt >= WATCHDOG_S


def test_killed_rank_ends_the_job(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    t_start = time.monotonic()
    proc = start(["ok", "--steps", 1_000_000, "--step-ms", 5, "--pid-dir", pid_dir])
    pids = read_pids(pid_dir)
    time.sleep(1.0)  # mid-run
    assert proc.poll() is None, "the job ended before the kill"
    t0 = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    rc, out, err, dt = finish(proc, t0, SAFETY_S)
    assert_gone(pids)
    print(f"\n[timing] kill -9 rank 1: rc={rc} in {dt:.2f} s (job ran {t0 - t_start:.1f} s)")
    assert rc != 0
    assert re.search(r"rank 1 with PID \d+ on node \S+ exited on signal 9", err), err
    assert "stuck for" not in err, err  # mpirun ended the job, not the survivors' watchdog


def test_single_rank_error_exits_without_abort(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    t0 = time.monotonic()
    rc, out, err, dt = finish(start(["throw-on-rank", 0, "--pid-dir", pid_dir], np=1), t0, SAFETY_S)
    assert rc == 2, err
    assert "vtrain: error: uncaught exception: injected failure at step 2" in err, err
    assert "MPI_ABORT" not in err, err


# --- vtrain itself: input only one rank sees (a path missing on one node, an MPMD launch whose
# ranks got different flags) ends every rank promptly with that rank's message, printed once.
VTRAIN = os.path.join(BUILD, "vtrain")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("rankdata")
    words = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth"]
    (d / "c.txt").write_text(" ".join(words[i % 8] for i in range(40000)) + "\n")
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "c.txt"), "--out", str(d / "data"),
                        "--tokenizer", "bpe:300", "--val-fraction", "0.1", "--quiet"],
                       capture_output=True, text=True, env=env())
    assert r.returncode == 0, r.stderr
    return d / "data"


def mpmd(rank0_args, rank1_args, timeout=SAFETY_S):
    """mpirun with rank 0 and rank 1 running vtrain with different arguments."""
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "1", VTRAIN,
           *map(str, rank0_args), ":", "-np", "1", VTRAIN, *map(str, rank1_args)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", env=env(VTRAIN_COMM_TIMEOUT="300"),
                            start_new_session=True)
    return finish(proc, t0, timeout)


def train_args(data_dir, **over):
    """`vtrain train` arguments with some flags replaced (flag name -> value)."""
    flags = {"--data": data_dir, "--preset": "tiny", "--seq-len": 32, "--micro-batch": 2,
             "--steps": 2, "--final-eval-tokens": 0}
    flags.update({f"--{k.replace('_', '-')}": v for k, v in over.items()})
    return ["train", *[str(x) for kv in flags.items() for x in kv]]


@pytest.mark.parametrize("rank1,needle", [
    (dict(data="/nonexistent/data"), "rank 1: --data /nonexistent/data is not a directory"),
    (dict(bogus_flag=3), "rank 1: unknown flag --bogus-flag"),
    (dict(micro_batch=0), "rank 1: --micro-batch"),
], ids=["data-missing-on-rank-1", "unknown-flag-on-rank-1", "bad-value-on-rank-1"])
def test_train_error_on_rank_1_only_ends_the_job_with_its_message(tiny_data, rank1, needle):
    rc, out, err, secs = mpmd(train_args(tiny_data), train_args(tiny_data, **rank1))
    assert rc == 2, out[-2000:] + err[-2000:]
    # The error is agreed, not waited out: no rank ran into the communication watchdog.
    print(f"\n[timing] ended in {secs:.1f} s")
    assert err.count(needle) == 1, err[-2000:]
    assert "stuck" not in err, err[-2000:]


def test_eval_error_on_rank_1_only_ends_the_job_with_its_message(tiny_data, tmp_path):
    ck = tmp_path / "ck"
    r = subprocess.run([VTRAIN, *train_args(tiny_data, ckpt_dir=ck)],
                       capture_output=True, text=True, env=env())
    assert r.returncode == 0, r.stderr[-2000:]
    good = ["eval", "--ckpt", ck / "step_00000002.h5", "--data", tiny_data]
    bad = ["eval", "--ckpt", tmp_path / "missing.h5", "--data", tiny_data]
    rc, out, err, secs = mpmd(good, bad)
    assert rc == 2, out[-2000:] + err[-2000:]
    print(f"\n[timing] ended in {secs:.1f} s")
    assert "rank 1: " in err and "missing.h5" in err, err[-2000:]
    assert "stuck" not in err, err[-2000:]
