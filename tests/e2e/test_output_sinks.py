"""What vtrain writes is whole or refused, never silently short (issue 39, items 3, 4, 5, 6, 8).

- --metrics and --tensorboard on a small full file system (a tmpfs of several sizes): the run
  goes on, each failing sink is named once on stderr, the metrics file holds whole lines up to
  the step the warning names, and TensorBoard's own reader reads the event file to the end.
- A metrics file whose last line was torn is repaired (named) before a resumed run appends.
- A resume from an earlier checkpoint: TensorBoard's reader shows each step once, with the
  resumed run's values (the SessionLog START marker); a second run into the same --tensorboard
  directory is refused by name.
- `vtrain diagnose --out` over a device, a directory, a FIFO, a link, inside --data or the
  checkpoint's directory: refused by name, /dev/full still a device.
- `vtrain plan --calibrate / --gemm-curve` on a directory, FIFO, device, oversized file and out
  of range values: refused by name, never an abort."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tensorboard.backend.event_processing import event_accumulator as ea

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.abspath(os.path.join(BUILD, "vtrain"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "2", "--eval-tokens", "256"]


def vt(*args, cwd=None, timeout=300):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=timeout, errors="replace")


def tb_steps(tb, tag="loss"):
    acc = ea.EventAccumulator(str(tb), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)} if tag in acc.Tags()["scalars"] else {}, \
        [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sinks")
    text = subprocess.run(["bible", "Gen1:1-Gen4:26"], capture_output=True, text=True).stdout
    (root / "c.txt").write_text(text)
    r = vt("prepare", "--input", root / "c.txt", "--out", root / "data", "--tokenizer", "bpe:300",
           "--quiet")
    assert r.returncode == 0, r.stderr
    r = vt("train", "--data", root / "data", *MODEL, "--steps", 4, "--ckpt-dir", root / "ckpt")
    assert r.returncode == 0, r.stderr
    return root


@pytest.fixture
def small_fs(tmp_path, request):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param}k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def metrics_lines(path):
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), raw[-200:]  # no torn last line
    return [json.loads(l) for l in raw.decode().splitlines()]


@pytest.mark.parametrize("small_fs", [16, 48, 96], indirect=True, ids=lambda k: f"{k}KiB")
@pytest.mark.parametrize("sinks", ["both", "metrics", "tensorboard"])
def test_a_full_disk_closes_each_sink_once_and_leaves_whole_records(run, small_fs, sinks):
    m, tb = small_fs / "m.jsonl", small_fs / "tb"
    args = (["--metrics", m] if sinks != "tensorboard" else []) + \
           (["--tensorboard", tb] if sinks != "metrics" else [])
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 500, "--eval-every", 50, *args)
    assert r.returncode == 0, r.stderr[-2000:]
    if sinks != "tensorboard":
        assert r.stderr.count("cannot write --metrics") == 1, r.stderr
        assert f"cannot write --metrics {m}: No space left on device" in r.stderr, r.stderr
        recs = metrics_lines(m)
        assert recs, "nothing was written at all"
        said = int(r.stderr.split("holds the records up to step ")[1].split(" ")[0])
        assert recs[-1]["step"] == said, (recs[-1], said)
        steps = [x["step"] for x in recs if "loss" in x]
        assert steps == list(range(1, len(steps) + 1))
    if sinks != "metrics":
        assert r.stderr.count("cannot write --tensorboard") == 1, r.stderr
        values, order = tb_steps(tb)  # TensorBoard's reader reads the file to its end
        assert order == list(range(1, len(order) + 1)) and len(order) < 500
        said = int(r.stderr.split("holds the events up to step ")[1].split(" ")[0])
        assert order[-1] <= said <= order[-1] + 1


def test_a_torn_last_line_is_repaired_before_a_resume_appends(run, tmp_path):
    m, ck = tmp_path / "m.jsonl", tmp_path / "ck"
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 6, "--stop-at-step", 3,
           "--ckpt-dir", ck, "--metrics", m)
    assert r.returncode == 75, r.stderr
    whole = m.read_bytes()
    m.write_bytes(whole + b'{"step": 4, "loss": 3.1, "lr": 0.0')  # a crash mid-record
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 6, "--resume", "auto",
           "--ckpt-dir", ck, "--metrics", m)
    assert r.returncode == 0, r.stderr
    assert f"--metrics {m} ended in a record cut off mid-write" in r.stdout, r.stdout
    assert "removed its 34 bytes" in r.stdout, r.stdout
    assert m.read_bytes().startswith(whole)
    steps = [x["step"] for x in metrics_lines(m) if "loss" in x]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("resume_step", [2, 4])
def test_tensorboard_after_a_resume_from_an_earlier_checkpoint_shows_each_step_once(run, tmp_path,
                                                                                     resume_step):
    m, ck, tb = tmp_path / "m.jsonl", tmp_path / "ck", tmp_path / "tb"
    base = ["train", "--data", run / "data", *MODEL, "--eval-every", 2, "--metrics", m,
            "--tensorboard", tb, "--ckpt-dir", ck]
    r = vt(*base, "--steps", 6, "--ckpt-every", 2, "--keep-last", 0)
    assert r.returncode == 0, r.stderr
    r = vt(*base, "--steps", 8, "--resume", ck / f"step_{resume_step:08d}.h5")
    assert r.returncode == 0, r.stderr
    values, order = tb_steps(tb)
    assert order == list(range(1, 9)), order  # no 5, 6, 5, 6
    recs = [x for x in metrics_lines(m) if "loss" in x]
    last = {x["step"]: x["loss"] for x in recs}  # the resumed run's own values win
    assert len(recs) == 8 + (6 - resume_step)  # the JSONL keeps both (readers take the last)
    for s, v in values.items():
        assert v == pytest.approx(last[s], rel=1e-6), s
    _, evals = tb_steps(tb, "val_bpb")
    assert evals == sorted(set(evals)), evals


def test_a_second_run_into_one_tensorboard_directory_is_refused_by_name(run, tmp_path):
    tb = tmp_path / "tb"
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 2, "--tensorboard", tb,
           "--ckpt-dir", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    before = sorted(p.name for p in tb.iterdir())
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 2, "--tensorboard", tb)
    assert r.returncode == 2 and f"--tensorboard {tb} already holds the event files of another " \
        "run (events.out.tfevents." in r.stderr, r.stderr
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 4, "--tensorboard", str(tb) + "/",
           "--ckpt-dir", tmp_path / "b", "--resume", "auto")
    assert r.returncode == 2 and f"names the checkpoint directory {tmp_path / 'a'}, this run's " \
        f"is {tmp_path / 'b'}" in r.stderr, r.stderr
    assert sorted(p.name for p in tb.iterdir()) == before
    # Its own resume, through another spelling of the same checkpoint directory, goes on.
    (tmp_path / "alink").symlink_to("a")
    r = vt("train", "--data", run / "data", *MODEL, "--steps", 4, "--tensorboard", tb,
           "--ckpt-dir", tmp_path / "alink", "--resume", "auto")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("out,why", [
    ("/dev/full", "is a character device"),
    ("/dev/null", "is a character device"),
    ("{tmp}", "is a directory"),
    ("{tmp}/", "names a directory"),
    ("{tmp}/.", "names a directory"),
    ("{tmp}/fifo", "is a FIFO"),
    ("{tmp}/link.json", "is a symbolic link"),
    ("{tmp}/nofolder/d.json", "does not exist"),
    ("{run}/data/d.json", "is inside the --data directory"),
    ("{run}/ckpt/d.json", "is inside the --ckpt checkpoint's directory"),
    ("{run}/ckpt/step_00000004.h5", "is inside the --ckpt checkpoint's directory"),
    ("{tmp}/cklink/d.json", "is inside the --ckpt checkpoint's directory"),
])
def test_diagnose_out_is_a_regular_file_or_nothing(run, tmp_path, out, why):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "target.json").write_text("keep\n")
    (tmp_path / "link.json").symlink_to("target.json")
    (tmp_path / "cklink").symlink_to(run / "ckpt")
    full = os.lstat("/dev/full")
    out = out.replace("{tmp}", str(tmp_path)).replace("{run}", str(run))
    r = vt("diagnose", "--ckpt", run / "ckpt" / "step_00000004.h5", "--data", run / "data",
           "--tokens", 512, "--out", out)
    assert r.returncode == 2 and f"--out {out}" in r.stderr and why in r.stderr, r.stderr
    assert "value mode" not in r.stdout  # refused before the pass
    now = os.lstat("/dev/full")
    assert (now.st_mode, now.st_rdev) == (full.st_mode, full.st_rdev)
    assert (tmp_path / "target.json").read_text() == "keep\n"
    assert not list(tmp_path.glob("*.tmp*")) and not list((run / "ckpt").glob("*.tmp*"))


def test_diagnose_out_replaces_a_regular_file_relative_to_the_working_directory(run, tmp_path):
    (tmp_path / "d.json").write_text("old\n")
    r = vt("diagnose", "--ckpt", run / "ckpt" / "step_00000004.h5", "--data", run / "data",
           "--tokens", 512, "--out", "./d.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "d.json").read_text())["step"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json"]


@pytest.mark.parametrize("flag", ["--calibrate", "--gemm-curve"])
@pytest.mark.parametrize("what,why", [
    ("dir", "is a directory, not a regular file"),
    ("dir/", "is a directory, not a regular file"),
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("/dev/zero", "is a character device, not a regular file"),
    ("/dev/null", "is a character device, not a regular file"),
    ("big", "bytes, more than the"),
    ("missing", "no such file"),
])
def test_plan_file_readers_refuse_what_is_not_a_small_regular_file(tmp_path, flag, what, why):
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    with open(tmp_path / "big", "wb") as f:  # sparse: larger than either limit, no disk used
        f.truncate(300 << 20)
    path = what if what.startswith("/") else f"{tmp_path}/{what}"
    r = vt("plan", "--preset", "d12", "--tokens", "1e9", "--gpus", 8, flag, path, timeout=600)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"{flag} {path}: " in r.stderr and why in r.stderr, r.stderr


@pytest.mark.parametrize("text,why", [
    ('{"presets": {"d12": {"mfu": 1e-300}}}', "MFU 1e-300 is outside [0.001, 1]"),
    ('{"presets": {"d12": {"mfu": 0.0005}}}', "MFU 0.0005 is outside [0.001, 1]"),
    ('{"presets": {"d12": {"mfu": 1.5}}}', "MFU 1.5 is outside [0.001, 1]"),
    ('{"step": 1, "mfu": 1e-300}\n{"step": 2, "mfu": 1e-300}\n', "MFU 1e-300 is outside"),
    ('{"tokens": [512], "efficiency": [1e-300]}', "GEMM efficiency 1e-300 is outside [0.001, 1]"),
    ('{"tokens": [1e300], "efficiency": [0.5]}', "tokens per GEMM 1e+300 is outside"),
])
def test_plan_values_from_files_have_the_flags_range(tmp_path, text, why):
    flag = "--gemm-curve" if "efficiency" in text else "--calibrate"
    (tmp_path / "f.json").write_text(text)
    r = vt("plan", "--preset", "d12", "--tokens", "1e9", "--gpus", 8, flag, tmp_path / "f.json")
    assert r.returncode == 2 and why in r.stderr and f"{flag} {tmp_path / 'f.json'}" in r.stderr, \
        r.stderr
    r = vt("plan", "--preset", "d12", "--tokens", "1e9", "--gpus", 8, "--mfu", "1e-300")
    assert r.returncode == 2 and "--mfu 1e-300: out of range, expected a number in [0.001, 1]" \
        in r.stderr, r.stderr
