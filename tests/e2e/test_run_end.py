"""The end of a `vtrain train` run (docs/usage.md "The end of a run"; src/train/run_progress.h):
the summary block after a stop (exit 75) and after the finished run, each field checked against
the metrics file and the files on disk, its resume line run as printed; the smoothed loss in the
metrics (nanochat's bias-corrected EMA, restarting at a resume) and on the console; the ETA
that waits for the first steps to pass."""
import json
import os
import re
import shlex
import subprocess

import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
TINY = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "64", "--window", "32",
        "--micro-batch", "4"]
TOKENS_PER_STEP = 4 * 64
BETA = 0.9  # SmoothedLoss::kBeta, nanochat's


def run(cmd, timeout=600):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    text = subprocess.run(["bible", "Gen1:1-Gen20:18"], capture_output=True, text=True).stdout
    assert len(text) > 50_000, "the bible-kjv package is needed (scripts/setup.sh installs it)"
    (d / "genesis.txt").write_text(text)
    r = run([VTRAIN, "prepare", "--input", str(d / "genesis.txt"), "--out", str(d / "gen"),
             "--tokenizer", "bpe:512", "--val-fraction", "0.1", "--quiet"])
    assert r.returncode == 0, r.stderr
    return d / "gen"


def summary_of(stdout):
    """The summary block: {"header": ..., label: text} from "== run summary" to the end."""
    i = stdout.find("== run summary")
    assert i >= 0, stdout[-3000:]
    lines = stdout[i:].rstrip("\n").split("\n")
    out = {"header": lines[0]}
    for line in lines[1:]:
        label, text = line[:12].strip(), line[13:]
        assert label and label not in out, (line, lines)
        out[label] = text
    return out


def records(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [r for r in rows if "loss" in r], [r for r in rows if "val_bpb" in r]


def ema(values):
    out, m = [], 0.0
    for i, v in enumerate(values):
        m = BETA * m + (1 - BETA) * v
        out.append(m / (1 - BETA ** (i + 1)))
    return out


def rate(tok_per_s):
    """tok/s as the summary prints it (run_progress.cc)."""
    if tok_per_s >= 1e6:
        return f"{tok_per_s / 1e6:.2f}M"
    return f"{tok_per_s / 1e3:.1f}k" if tok_per_s >= 1e3 else f"{tok_per_s:.0f}"


def check_throughput(text, steps):
    """The median tok/s and MFU the summary names are the medians of the steps' records (the
    metrics hold them to the last bit), printed as the summary prints them."""
    tps = float(np.median([s["tok_per_s"] for s in steps]))
    mfu = float(np.median([s["mfu"] for s in steps]))
    assert text == (f"median {rate(tps)} tok/s, median MFU {100 * mfu:.2f}% (over {len(steps)} "
                    f"steps)"), (text, tps, mfu)


def test_summary_after_a_stop_and_after_the_resume(datadir, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [VTRAIN, "train", "--data", str(datadir), *TINY, "--steps", "30", "--eval-every", "10",
           "--eval-tokens", "2048", "--log-every", "1", "--ckpt-dir", str(run_dir / "ckpt"),
           "--metrics", str(run_dir / "metrics.jsonl"), "--tensorboard", str(run_dir / "tb"),
           "--seed", "5"]
    r = run(cmd + ["--stop-at-step", "20"])
    assert r.returncode == 75, r.stdout[-3000:] + r.stderr[-3000:]
    s = summary_of(r.stdout)
    steps, evals = records(run_dir / "metrics.jsonl")
    assert s["header"] == "== run summary: stopped after step 20 of 30, resumable ==", s
    assert s["wall time"].endswith("for steps 1-20 (set-up and evaluations included)"), s
    assert s["tokens"] == f"{20 * TOKENS_PER_STEP} in this invocation, {20 * TOKENS_PER_STEP} in all"
    check_throughput(s["throughput"], steps)
    best = min(evals, key=lambda e: e["val_bpb"])
    assert [e["step"] for e in evals] == [0, 10, 20]
    assert s["val bpb"] == (f"final {evals[-1]['val_bpb']:.4f} at step 20, best "
                            f"{best['val_bpb']:.4f} at step {best['step']} (3 evaluations)"), s
    assert s["checkpoint"] == str(run_dir / "ckpt" / "step_00000020.h5")
    assert (run_dir / "ckpt" / "step_00000020.h5").is_file()
    assert s["metrics"] == str(run_dir / "metrics.jsonl")
    assert s["plots"] == (f".venv/bin/python launch/plot_run.py {run_dir / 'metrics.jsonl'} "
                          f"--out {run_dir / 'plots'}")
    assert s["tensorboard"] == f".venv/bin/tensorboard --logdir {run_dir / 'tb'}"
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "tb").rglob("*"))
    # The resume line is the command without --stop-at-step, with --resume auto: run as printed.
    assert "--stop-at-step" not in s["resume"] and s["resume"].endswith(" --resume auto"), s
    r2 = run(shlex.split(s["resume"]))
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
    assert f"resumed from {run_dir / 'ckpt' / 'step_00000020.h5'} at step 20" in r2.stdout
    s2 = summary_of(r2.stdout)
    steps2, evals2 = records(run_dir / "metrics.jsonl")
    assert s2["header"] == "== run summary: finished, 30 of 30 steps ==", s2
    assert s2["wall time"].endswith("for steps 21-30 (set-up and evaluations included)"), s2
    assert s2["tokens"] == f"{10 * TOKENS_PER_STEP} in this invocation, {30 * TOKENS_PER_STEP} in all"
    check_throughput(s2["throughput"], [x for x in steps2 if x["step"] > 20])
    # Best and final over the whole run: the earlier invocation's evaluations come from the file.
    assert [e["step"] for e in evals2] == [0, 10, 20, 30]
    best = min(evals2, key=lambda e: e["val_bpb"])
    assert s2["val bpb"] == (f"final {evals2[-1]['val_bpb']:.4f} at step 30, best "
                             f"{best['val_bpb']:.4f} at step {best['step']} (4 evaluations, 3 of "
                             f"them before the resume, from the metrics file)"), s2
    assert s2["checkpoint"] == str(run_dir / "ckpt" / "step_00000030.h5")
    assert s2["resume"].startswith("(the run is complete) to train further, raise --steps in: ")


def test_summary_without_checkpoints_or_metrics(datadir):
    r = run([VTRAIN, "train", "--data", str(datadir), *TINY, "--steps", "3",
             "--final-eval-tokens", "0"])
    assert r.returncode == 0, r.stderr
    s = summary_of(r.stdout)
    assert s["header"] == "== run summary: finished, 3 of 3 steps ==", s
    assert s["checkpoint"] == "none (no --ckpt-dir): this run cannot be resumed"
    assert s["metrics"].startswith("none") and s["val bpb"] == "no evaluation"
    assert "resume" not in s and "plots" not in s and "tensorboard" not in s, s


def test_smoothed_loss_in_the_metrics_and_on_the_console(datadir, tmp_path):
    m = tmp_path / "m.jsonl"
    cmd = [VTRAIN, "train", "--data", str(datadir), *TINY, "--steps", "16", "--log-every", "1",
           "--final-eval-tokens", "0", "--ckpt-dir", str(tmp_path / "ck"), "--metrics", str(m)]
    r = run(cmd + ["--stop-at-step", "9"])
    assert r.returncode == 75, r.stderr
    r2 = run(cmd + ["--resume", "auto"])
    assert r2.returncode == 0, r2.stderr
    steps, _ = records(m)
    assert [x["step"] for x in steps] == list(range(1, 17))
    for part in (steps[:9], steps[9:]):  # the average restarts with the process
        losses = [x["loss"] for x in part]
        np.testing.assert_allclose([x["loss_smooth"] for x in part], ema(losses), rtol=1e-12)
        assert part[0]["loss_smooth"] == pytest.approx(part[0]["loss"], rel=1e-12)
    # The console shows both, as the metrics hold them.
    for x, out in ((steps[3], r.stdout), (steps[12], r2.stdout)):
        assert f"step {x['step']}/16 | loss {x['loss']:.4f} (smoothed {x['loss_smooth']:.4f}) |" \
            in out, out[-2000:]
    # The ETA waits for the first 5 steps of each process (EtaWindow::kSkip), then has a value.
    for out, first in ((r.stdout, 1), (r2.stdout, 10)):
        lines = {int(k): v for k, v in re.findall(r"^step (\d+)/16 \|(.*)$", out, re.M)}
        for step, rest in lines.items():
            measuring = step < first + 5
            assert rest.endswith("eta (measuring)") == measuring, (step, rest)
            if not measuring:
                assert re.search(r"eta \d+(s|m\d\ds|h\d\dm)$", rest), (step, rest)
