"""Checkpoint/resume through the CLI: a run stopped and resumed on the same layout continues bit
for bit; resumed on other layouts (tp=2, one process) it continues to fp32 round-off; a process
killed in the middle of saving leaves the previous checkpoint loadable and `--resume auto`
picks it; a corrupt newest checkpoint is skipped; a foreign or other-architecture file is
refused with a message naming the problem."""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
MODEL = ["--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--seq-len", "32",
         "--window", "8", "--value", "resformer-plus", "--micro-batch", "2",
         "--global-batch", "256", "--eval-tokens", "1024", "--seed", "9"]
STEPS = 8


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    text = subprocess.run(["bible", "Gen1:1-Gen30:43"], capture_output=True, text=True).stdout
    (d / "c.txt").write_text(text)
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "c.txt"), "--out", str(d / "data"),
                        "--tokenizer", "bpe:400", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d / "data"


def train(datadir, ckpt, metrics, ranks=1, tp=1, pp=1, extra=(), expect=0):
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", str(STEPS), "--tp", str(tp),
           "--pp", str(pp), "--ckpt-dir", str(ckpt), "--metrics", str(metrics), *extra]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == expect, f"{' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def losses(metrics):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(metrics) if '"loss"' in l}


def test_resume_same_layout_is_exact_and_other_layouts_match(datadir, tmp_path):
    full = tmp_path / "full"
    train(datadir, full, tmp_path / "full.jsonl", ranks=4, pp=2)  # dp 2 x pp 2
    ref = losses(tmp_path / "full.jsonl")
    assert sorted(ref) == list(range(1, STEPS + 1))
    part = tmp_path / "part"
    r = train(datadir, part, tmp_path / "part.jsonl", ranks=4, pp=2,
              extra=["--stop-at-step", "4"], expect=75)
    assert "checkpoint of step 4 saved" in r.stdout
    train(datadir, part, tmp_path / "part.jsonl", ranks=4, pp=2, extra=["--resume", "auto"])
    got = losses(tmp_path / "part.jsonl")
    for step in range(5, STEPS + 1):
        assert got[step] == ref[step], f"step {step}: {got[step]!r} != {ref[step]!r} (must be exact)"
    start = part / "step_00000004.h5"
    for ranks, tp, pp in [(2, 2, 1), (1, 1, 1)]:
        m = tmp_path / f"other_{ranks}{tp}{pp}.jsonl"
        train(datadir, tmp_path / f"other_{ranks}{tp}{pp}", m, ranks=ranks, tp=tp, pp=pp,
              extra=["--resume", str(start)])
        other = losses(m)
        assert sorted(other) == list(range(5, STEPS + 1))
        for step in other:
            assert other[step] == pytest.approx(ref[step], rel=1e-5), (ranks, tp, pp, step)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_kill_during_save_keeps_previous_checkpoint(datadir, tmp_path, async_save):
    ckpt = tmp_path / "ckpt"
    # Save every step; kill -9 the moment a .tmp file (a save in progress) appears. With
    # --async-save the write is on a background thread while training goes on.
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "200", "--ckpt-dir",
           str(ckpt), "--ckpt-every", "1", "--keep-last", "2"] + (["--async-save"] if async_save else [])
    killed_during_save = 0
    for attempt in range(3):
        p = subprocess.Popen(cmd + (["--resume", "auto"] if attempt else []), env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 900  # a safety net: the run ends on its own long before
        while time.time() < deadline and p.poll() is None:
            tmps = list(ckpt.glob("*.tmp")) if ckpt.exists() else []
            done = list(ckpt.glob("step_*.h5")) if ckpt.exists() else []
            if tmps and len(done) >= 1:
                p.send_signal(signal.SIGKILL)
                killed_during_save += 1
                break
            time.sleep(0.001)
        p.kill()
        p.wait()
        # Whatever the moment, auto-resume finds the newest complete checkpoint and continues.
        steps = sorted(int(f.name[5:13]) for f in ckpt.glob("step_*.h5"))
        assert steps, "no complete checkpoint survived"
        # `latest` names a complete checkpoint that verifies (never the interrupted one). The one
        # moment without a pointer: the first save killed between its rename and writing `latest`
        # (`latest.tmp` matches the glob above); then the only checkpoint is that first one.
        if (ckpt / "latest").exists():
            pointed = (ckpt / "latest").read_text().strip()
        else:
            assert len(steps) == 1, ("no latest pointer beside several checkpoints", steps)
            pointed = f"step_{steps[0]:08d}.h5"
        assert pointed in {f"step_{s:08d}.h5" for s in steps}, (pointed, steps)
        v = subprocess.run([VTRAIN, "ckpt", "verify", str(ckpt / pointed)], capture_output=True, text=True)
        assert v.returncode == 0, v.stderr
        r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "200",
                            "--ckpt-dir", str(ckpt), "--resume", "auto",
                            "--stop-at-step", str(steps[-1] + 1)],
                           capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 75, r.stderr
        assert f"resumed from {ckpt / f'step_{steps[-1]:08d}.h5'} at step {steps[-1]}" in r.stdout
        latest = (ckpt / "latest").read_text().strip()
        assert latest == f"step_{steps[-1] + 1:08d}.h5"
        v = subprocess.run([VTRAIN, "ckpt", "verify", str(ckpt / latest)], capture_output=True, text=True)
        assert v.returncode == 0, v.stderr
    assert killed_during_save >= 1, "never caught a save in progress"


def test_corrupt_newest_is_skipped_and_foreign_files_refused(datadir, tmp_path):
    ckpt = tmp_path / "ckpt"
    train(datadir, ckpt, tmp_path / "m.jsonl", extra=["--ckpt-every", "2", "--keep-last", "0"])
    newest = ckpt / f"step_{STEPS:08d}.h5"
    import h5py
    with h5py.File(newest, "r") as f:  # where the bytes of one parameter lie in the file
        offset = f["model"]["blocks.1.mlp.fc"].id.get_offset()
    data = bytearray(newest.read_bytes())
    data[offset + 100: offset + 164] = b"\x7f" * 64  # corrupt that parameter's data
    newest.write_bytes(bytes(data))
    v = subprocess.run([VTRAIN, "ckpt", "verify", str(newest)], capture_output=True, text=True)
    assert v.returncode != 0 and "checksum" in v.stderr.lower(), v.stderr
    assert "blocks.1.mlp.fc" in v.stderr, v.stderr
    r = train(datadir, ckpt, tmp_path / "m2.jsonl", extra=["--resume", "auto", "--stop-at-step", "7"],
              expect=75)
    assert f"resumed from {ckpt / 'step_00000006.h5'}" in r.stdout, r.stdout
    # Foreign and other-architecture files.
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all" * 100)
    r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "9",
                        "--resume", str(tmp_path / "junk.h5")], capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "junk.h5" in r.stderr and "HDF5" in r.stderr, r.stderr
    other = list(MODEL)
    other[other.index("--layers") + 1] = "3"  # 3 layers instead of 4
    r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *other, "--steps", "9",
                        "--resume", str(ckpt / "step_00000006.h5")], capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "n_layer: checkpoint 4, model 3" in r.stderr, r.stderr


def test_killed_and_resumed_run_ends_with_the_same_loss(datadir, tmp_path):
    """kill -9 in the middle of training (no chance to save), resume from the last periodic
    checkpoint: the redone steps and the final loss equal those of a run that never stopped."""
    train(datadir, tmp_path / "ref", tmp_path / "ref.jsonl", ranks=2, pp=2)
    ref = losses(tmp_path / "ref.jsonl")
    ckpt, metrics = tmp_path / "killed", tmp_path / "killed.jsonl"
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", VTRAIN, "train",
           "--data", str(datadir), *MODEL, "--steps", str(STEPS), "--pp", "2", "--ckpt-dir",
           str(ckpt), "--ckpt-every", "2", "--metrics", str(metrics)]
    # Rank 0 pauses 1.5 s at the start of every step (VTRAIN_INJECT_SLOW_RANK; the losses are
    # those of an unpaused run): once step 4's checkpoint exists, the 4 steps left take at least
    # 6 s, so the kill lands mid-run however slowly this test polls on a busy machine.
    p = subprocess.Popen(cmd, env=dict(ENV, VTRAIN_INJECT_SLOW_RANK="0:1.5"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.time() + 900
    while time.time() < deadline and p.poll() is None:
        if (ckpt / "step_00000004.h5").exists():
            os.killpg(p.pid, signal.SIGKILL)  # mpirun and both ranks, mid-run
            break
        time.sleep(0.002)
    p.wait()
    # mpirun's ranks may outlive it for a moment: make sure nothing of the killed run still runs
    # (it would keep writing into the same checkpoint directory).
    subprocess.run(["pkill", "-9", "-f", str(ckpt)])
    deadline = time.time() + 300
    while time.time() < deadline and subprocess.run(["pgrep", "-f", str(ckpt)],
                                                    capture_output=True).returncode == 0:
        time.sleep(0.05)
    done = losses(metrics)
    assert max(done) < STEPS, "the run finished before it could be killed; the test needs a slower run"
    train(datadir, ckpt, metrics, ranks=2, pp=2, extra=["--resume", "auto"])
    after = [json.loads(l) for l in open(metrics) if '"loss"' in l]
    last = {r["step"]: r["loss"] for r in after}  # the resumed run's lines come last
    assert last[STEPS] == ref[STEPS], (last[STEPS], ref[STEPS])
    for step in range(1, STEPS + 1):
        assert last[step] == ref[step], step


def test_two_runs_cannot_share_a_checkpoint_directory(datadir, tmp_path):
    ckpt = tmp_path / "ckpt"
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--steps", "100000", "--ckpt-dir",
           str(ckpt)]
    first = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first.stdout.readline()  # it is running (and holds the lock) once it prints
        second = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
        assert second.returncode == 2, second.stderr
        assert "another vtrain run is using --ckpt-dir" in second.stderr, second.stderr
    finally:
        first.kill()
        first.wait()
    # Once the first run is gone the directory is free again.
    r = subprocess.run(cmd[:-4] + ["--steps", "1", "--ckpt-dir", str(ckpt)], capture_output=True,
                       text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
