# tests/launch/test_wandb_follow.py owns the checks of launch/wandb_follow.py: in wandb's offline
# mode (no network, no login, every wandb directory in the test's tmp) the follower mirrors a
# metrics file into a wandb run, and the test reads the run back from wandb's own offline files
# with wandb's own reader (`wandb leet inspect --json`, the package's inspector of .wandb
# transaction logs): every record at its step with its values, the config (from a JSON file or
# a vtrain checkpoint), a file that grows while it is followed (a line written in two pieces, a
# resumed run re-running steps), the stop at the run's final record, at --idle, and the errors.
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
FOLLOW = ROOT / "launch" / "wandb_follow.py"
sys.path.insert(0, str(ROOT / "launch"))
import wandb_follow  # noqa: E402

try:
    import wandb  # noqa: F401
except ImportError:
    pytest.fail("wandb is not installed: it is in scripts/requirements.txt (bash scripts/setup.sh)",
                pytrace=False)


@pytest.fixture
def wandb_env(tmp_path):
    """Offline, silent, and every directory wandb writes to inside tmp_path; proxies that lead
    nowhere, so a network attempt would fail rather than reach out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    d = tmp_path / "wandb_home"
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(d),
               WANDB_CONFIG_DIR=str(d / "config"), WANDB_CACHE_DIR=str(d / "cache"),
               WANDB_DATA_DIR=str(d / "data"), WANDB_DISABLE_GIT="true",
               WANDB_DISABLE_CODE="true", HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    d.mkdir()
    return env


def follow(env, *args, timeout=600, wait=True):
    cmd = [sys.executable, str(FOLLOW), *map(str, args)]
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def offline_run(env):
    """(summary, history) of the one offline run under WANDB_DIR, read with wandb's inspector:
    history is {step: the row's values}."""
    files = list(Path(env["WANDB_DIR"]).glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    def inspect(*flags):
        r = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", *flags, "--json",
                            str(files[0])], capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout
    summary = json.loads(inspect("--summary"))
    history = {}
    for line in inspect().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "history":
            item = rec["history"]["item"]
            step = rec["history"]["step"]["num"]
            assert step not in history, f"step {step} logged twice"
            history[step] = {k: v for k, v in item.items() if not k.startswith("_")}
    return summary, history


def step_line(s, loss):
    return json.dumps({"step": s, "loss": loss, "lr": 0.001 * s, "tokens": 64 * s,
                       "tok_per_s": 1000.0 + s, "mfu": 0.25, "grad_norm": 1.5, "comm_s": 0.0})


def metrics_lines():
    """Steps 1..8 (4 skipped as non-finite), evaluations at 0 and 8, a checkpoint at 4, a resume
    from it that re-ran 5..6 with other losses, then 7..8, CORE at 8; a cut-off last line."""
    lines = [json.dumps({"step": 0, "val_bpb": 3.5, "val_loss": 4.0, "val_tokens": 256})]
    for s in range(1, 7):
        if s == 4:
            lines.append(json.dumps({"step": 4, "skipped": True, "loss": None,
                                     "grad_norm": None}))
            lines.append(json.dumps({"step": 4, "ckpt_pause_s": 0.25, "ckpt_wait_s": 0.0,
                                     "ckpt_async": True}))
        else:
            lines.append(step_line(s, 5.0 - 0.25 * s))
    for s in range(5, 9):  # resumed from step 4
        lines.append(step_line(s, 4.0 - 0.25 * s))
    lines.append(json.dumps({"step": 8, "val_bpb": 2.25, "val_loss": 2.5, "val_tokens": 256}))
    lines.append(json.dumps({"step": 8, "core": 0.5, "core_centered": {"arc": 0.25},
                             "core_accuracy": {"arc": 0.75}}))
    return lines


def test_once_logs_every_record_at_its_step(tmp_path, wandb_env):
    m = tmp_path / "metrics.jsonl"
    m.write_text("\n".join(metrics_lines()) + '\n{"step":9,"loss":1.2')  # cut off
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({"steps": 8, "value": "bov", "lr_scale": 0.5}))
    r = follow(wandb_env, m, "--project", "vt-test", "--name", "tiny", "--config", cfg, "--once")
    assert r.returncode == 0, r.stderr
    assert "incomplete" in r.stderr and "Traceback" not in r.stderr, r.stderr
    summary, hist = offline_run(wandb_env)
    assert summary["project"] == "vt-test" and summary["name"] == "tiny"
    assert summary["state"] == "finished" and summary["exit_code"] == 0
    assert summary["config"]["value"] == "bov" and summary["config"]["lr_scale"] == 0.5
    assert summary["config"]["metrics_file"] == str(m.resolve())
    assert sorted(hist) == list(range(0, 9))  # the cut-off step 9 is not logged
    assert hist[0] == {"val_bpb": 3.5, "val_loss": 4.0, "val_tokens": 256}
    # The resumed run's values for the steps it re-ran (the file's last word).
    for s in (5, 6, 7, 8):
        assert hist[s]["loss"] == pytest.approx(4.0 - 0.25 * s), s
    for s in (1, 2, 3):
        assert hist[s]["loss"] == pytest.approx(5.0 - 0.25 * s), s
    assert hist[3] == {"loss": 4.25, "lr": 0.003, "tokens": 192, "tok_per_s": 1003.0,
                       "mfu": 0.25, "grad_norm": 1.5, "comm_s": 0.0}
    # The skipped step: a marker, no loss; its checkpoint record in the same row.
    assert hist[4] == {"skipped": 1, "ckpt_pause_s": 0.25, "ckpt_wait_s": 0.0, "ckpt_async": 1}
    # Step 8: the training step, the final evaluation and CORE in one row.
    assert hist[8]["val_bpb"] == 2.25 and hist[8]["core"] == 0.5 and hist[8]["tokens"] == 512
    assert hist[8]["core_centered/arc"] == 0.25 and hist[8]["core_accuracy/arc"] == 0.75
    assert "logged" in r.stderr and "up to step 8" in r.stderr


class StderrLines:
    """The lines a running follower writes to stderr, read by a thread as they come; wait_for
    returns once a line holds a text (a condition, not a pause), or fails after `timeout`
    seconds naming what it waited for and what came."""

    def __init__(self, proc):
        self.lines, self.cond = [], threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # the end of the stream
            self.cond.notify_all()

    def wait_for(self, text, timeout=600):
        with self.cond:
            ok = self.cond.wait_for(lambda: any(l is None or text in l for l in self.lines),
                                    timeout)
            seen = "".join(l for l in self.lines if l)
        assert ok and text in seen, f"waited for {text!r} on the follower's stderr; it wrote:\n{seen}"
        return seen

    def text(self):
        self.thread.join(timeout=600)
        return "".join(l for l in self.lines if l)


def test_follows_a_growing_file_to_its_final_record(tmp_path, wandb_env):
    m = tmp_path / "run" / "metrics.jsonl"  # does not exist yet: the follower waits for it
    m.parent.mkdir()
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({"steps": 6, "final_eval_tokens": 256, "core_every": 0}))
    p = follow(wandb_env, m, "--project", "vt-test", "--config", cfg, "--poll", "0.05",
               "--idle", "600", wait=False)
    err = StderrLines(p)
    try:
        # The run so far appears whole (written beside and renamed): an evaluation and steps 1-4.
        part = tmp_path / "run" / "metrics.part"
        part.write_text("".join(l + "\n" for l in [
            json.dumps({"step": 0, "val_bpb": 3.0, "val_loss": 3.5, "val_tokens": 64}),
            step_line(1, 4.0), step_line(2, 3.0), step_line(3, 2.0), step_line(4, 1.5)]))
        part.rename(m)
        # The follower has logged them (up to step 4) before anything more is written: what
        # follows is read after them, however busy the machine is.
        seen = err.wait_for("following ")
        assert "5 records logged up to step 4" in seen, seen
        assert p.poll() is None, "the follower stopped before the final record"
        with open(m, "a") as f:
            def put(text):
                f.write(text)
                f.flush()
            # A resume from step 2: re-runs 3 and 4 (other losses), then 5 and 6; step 5's line
            # in two pieces (nothing is logged until it is whole, whenever the follower looks).
            put(step_line(3, 1.75) + "\n" + step_line(4, 1.25) + "\n")
            line = step_line(5, 1.0) + "\n"
            put(line[:17])
            put(line[17:])
            put(step_line(6, 0.75) + "\n")
            put(json.dumps({"step": 6, "ckpt_pause_s": 0.1, "ckpt_wait_s": 0.0,
                            "ckpt_async": False}) + "\n")
            put(json.dumps({"step": 6, "val_bpb": 1.5, "val_loss": 1.75, "val_tokens": 64})
                + "\n")
        p.wait(timeout=600)  # it stops by itself at the final evaluation
    finally:
        if p.poll() is None:
            p.kill()
    text = err.text()
    assert p.returncode == 0, text
    assert "the run's final record" in text and "left out 1 records" in text, text
    _, hist = offline_run(wandb_env)
    assert sorted(hist) == [0, 1, 2, 3, 4, 5, 6]
    assert hist[3]["loss"] == 2.0   # logged before the resume re-ran it: wandb keeps it
    assert hist[4]["loss"] == 1.25  # the re-run of the last logged step replaces it
    assert hist[5]["loss"] == 1.0 and hist[6]["loss"] == 0.75
    assert hist[6]["val_bpb"] == 1.5 and hist[6]["ckpt_pause_s"] == 0.1


def test_a_line_in_pieces_is_read_when_whole(tmp_path):
    # The follower's reader (no wandb): a line whose end has not been written yet gives nothing,
    # and the record once its end comes; a record appended to it in the same write too.
    m = tmp_path / "metrics.jsonl"
    f = wandb_follow.Follower(m, None, None, log=lambda msg: None)
    assert f.read_new() == []  # no file yet
    line = step_line(1, 4.0) + "\n"
    m.write_text(line[:17])
    assert f.read_new() == [] and f.rest == line[:17].encode()
    with open(m, "a") as out:
        out.write(line[17:] + step_line(2, 3.0)[:5])
    assert [r["step"] for r in f.read_new()] == [1]
    with open(m, "a") as out:
        out.write(step_line(2, 3.0)[5:] + "\n")
    assert [r["step"] for r in f.read_new()] == [2] and f.rest == b""


def test_stops_when_idle_without_a_step_count(tmp_path, wandb_env):
    m = tmp_path / "metrics.jsonl"
    m.write_text(step_line(1, 3.0) + "\n" + step_line(2, 2.5) + "\n")
    r = follow(wandb_env, m, "--project", "vt-test", "--idle", "1", "--poll", "0.1")
    assert r.returncode == 0, r.stderr
    assert "nothing new for 1 s" in r.stderr and "no final record" in r.stderr, r.stderr
    _, hist = offline_run(wandb_env)
    assert hist == {s: {k: v for k, v in json.loads(step_line(s, loss)).items() if k != "step"}
                    for s, loss in ((1, 3.0), (2, 2.5))}


def write_checkpoint(path, steps=8, core_every=0, final_eval_tokens=256):
    h5py = pytest.importorskip("h5py")
    options = {"steps": steps, "core_every": core_every, "final_eval_tokens": final_eval_tokens,
               "eval_tokens": 256, "seed": 7, "data_fingerprint": "v1:abc",
               "pending_eval_tokens": 256}
    with h5py.File(path, "w") as f:
        f.attrs["format"] = b"vtrain-checkpoint"
        f.attrs["config"] = json.dumps({"n_layer": 2, "value_mode": "bov"}).encode()
        f.attrs["extra"] = json.dumps(options).encode()
        f.attrs["step"] = 4


def test_config_from_a_checkpoint_and_its_final_record(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    write_checkpoint(d / "step_00000004.h5")
    (d / "latest").write_text("step_00000004.h5\n")
    for arg in (d, d / "step_00000004.h5"):
        cfg = wandb_follow.read_config(str(arg))
        assert cfg["steps"] == 8 and cfg["seed"] == 7 and cfg["model"]["value_mode"] == "bov"
        assert cfg["checkpoint_step"] == 4 and "pending_eval_tokens" not in cfg
        assert wandb_follow.final_record(cfg, None) == ("eval", 8)
    assert wandb_follow.final_record({"steps": 8, "core_every": 4}, None) == ("core", 8)
    assert wandb_follow.final_record({"steps": 8, "final_eval_tokens": 0}, None) == ("step", 8)
    assert wandb_follow.final_record({"steps": 8}, None) == ("eval", 8)  # vtrain's default
    assert wandb_follow.final_record({}, 5) == ("eval", 5)
    assert wandb_follow.final_record({}, None) is None


def test_config_from_a_checkpoint_reaches_wandb(tmp_path, wandb_env):
    write_checkpoint(tmp_path / "c.h5", steps=2, final_eval_tokens=0)
    m = tmp_path / "metrics.jsonl"
    m.write_text(step_line(1, 3.0) + "\n" + step_line(2, 2.5) + "\n")
    r = follow(wandb_env, m, "--project", "vt-test", "--config", tmp_path / "c.h5",
               "--idle", "60", "--poll", "0.1")  # the step line at 2 is the final record
    assert r.returncode == 0 and "the run's final record" in r.stderr, r.stderr
    summary, hist = offline_run(wandb_env)
    assert summary["config"]["model"] == {"n_layer": 2, "value_mode": "bov"}
    assert summary["config"]["steps"] == 2 and sorted(hist) == [1, 2]


@pytest.mark.parametrize("args,message", [
    (["missing.jsonl", "--once"], "missing.jsonl: no such file"),
    (["empty.jsonl", "--once"], "empty.jsonl: empty"),
    (["m.jsonl", "--config", "nope.json"], "--config nope.json: no such file"),
    (["m.jsonl", "--config", "list.json"], "--config list.json: the JSON is not an object"),
    (["later.jsonl", "--idle", "0.3", "--poll", "0.1"], "later.jsonl: no such file after waiting"),
    (["m.jsonl", "--steps", "0"], "--steps 0: must be positive"),
])
def test_errors_name_the_file(tmp_path, wandb_env, args, message):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "m.jsonl").write_text(step_line(1, 3.0) + "\n")
    r = subprocess.run([sys.executable, str(FOLLOW), *args, "--project", "p"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, env=wandb_env)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list(Path(wandb_env["WANDB_DIR"]).glob("wandb/*run-*")), "a wandb run was made"
