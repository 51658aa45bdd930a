"""A stop signal during an evaluation never records a partial result as the evaluation (issue 25,
item 4). One process, SIGUSR1 as soon as an evaluation starts:
- the final evaluation (it runs after the final checkpoint is saved): the run exits 75, not 0,
  prints how far the pass got, writes no val_loss; resuming runs that evaluation in full (every
  planned token, in the metrics) and trains nothing;
- an --eval-every evaluation: exit 75 with the checkpoint of that step; the resumed run
  evaluates that step first, in full, then trains on, and the metrics hold one complete
  evaluation per evaluated step.
(Evaluation metrics lines carry val_tokens: the tokens the value covers.)"""
import json
import os
import signal
import subprocess
import time

import pytest
from bible_data import prepare_bible

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
# Evaluations of ~1-2 s (many micro-batches of one row): the signal lands inside one.
MODEL = ["--layers", "4", "--dim", "256", "--heads", "4", "--seq-len", "64", "--window", "32",
         "--micro-batch", "1", "--global-batch", "64", "--seed", "3"]
EVAL_TOKENS = 16384


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    return prepare_bible(tmp_path_factory.mktemp("stopeval"), "Gen1:1-Gen30:43",
                         "--val-fraction", "0.5")


def run_until(args, marker, timeout=900):
    """Starts vtrain; sends SIGUSR1 when a line containing `marker` is printed; returns (exit
    code, output)."""
    proc = subprocess.Popen([VTRAIN, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", env=ENV)
    out, sent = [], False
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        out.append(line)
        if not sent and marker in line:
            proc.send_signal(signal.SIGUSR1)
            sent = True
        assert time.monotonic() < deadline, "".join(out[-30:])
    proc.wait(timeout=600)
    assert sent, "the marker never appeared:\n" + "".join(out[-30:])
    return proc.returncode, "".join(out)


def evals(metrics):
    rows = [json.loads(l) for l in open(metrics) if l.strip()]
    return [r for r in rows if "val_loss" in r]


def test_stop_during_the_final_evaluation(datadir, tmp_path):
    ck, m = tmp_path / "ck", tmp_path / "m.jsonl"
    base = ["train", "--data", datadir, *MODEL, "--steps", "3", "--ckpt-dir", ck,
            "--final-eval-tokens", EVAL_TOKENS]
    rc, out = run_until(base + ["--metrics", m], "saved checkpoint")
    assert rc == 75, out[-3000:]
    assert "stopped by a signal after" in out and "not recorded" in out, out[-3000:]
    assert "during the final evaluation" in out
    assert evals(m) == []
    # Resumed: the final evaluation, in full, and no training step.
    r = subprocess.run([VTRAIN, *map(str, base), "--metrics", tmp_path / "m2.jsonl", "--resume",
                        "auto"], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "marks pending" in r.stdout and "nothing to train" in r.stdout, r.stdout[-3000:]
    (e,) = evals(tmp_path / "m2.jsonl")
    assert e["step"] == 3 and e["val_tokens"] == EVAL_TOKENS, e


def test_stop_during_an_eval_every_evaluation(datadir, tmp_path):
    ck, m = tmp_path / "ck", tmp_path / "m.jsonl"
    base = ["train", "--data", datadir, *MODEL, "--steps", "4", "--ckpt-dir", ck,
            "--eval-every", "2", "--eval-tokens", EVAL_TOKENS, "--final-eval-tokens", "0",
            "--metrics", m]
    rc, out = run_until(base, "step 2/4")
    assert rc == 75, out[-3000:]
    assert "eval step 2 | stopped by a signal" in out, out[-3000:]
    assert [e["step"] for e in evals(m)] == [0]  # the evaluation before the first step
    assert (ck / "step_00000002.h5").exists()
    r = subprocess.run([VTRAIN, *map(str, base), "--resume", "auto"], capture_output=True,
                       text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "running the evaluation of step 2" in r.stdout, r.stdout[-3000:]
    got = [(e["step"], e["val_tokens"]) for e in evals(m)]
    # Step 4 is the last: --eval-every does not evaluate it and --final-eval-tokens is 0.
    assert got == [(0, EVAL_TOKENS), (2, EVAL_TOKENS)], got
    assert "step 4/4" in r.stdout, r.stdout[-3000:]
