# tests/launch/test_plot_run.py owns the checks of launch/plot_run.py and the metrics reader it
# shares (launch/run_metrics.py): on synthetic metrics files whose values are known (a resumed
# run that re-ran steps, a skipped step, a cut-off last line, a crash followed by an appended
# resume, a run without evaluations or MFU) the figures hold the expected curves with the
# expected data, the PNGs are images of the expected size, the Markdown summary holds the
# expected numbers, and bad input is refused naming the file; then one real tiny run of
# build/vtrain (a few seconds) is plotted. Needs build/vtrain for the last test (VTRAIN_BUILD).
import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("VTRAIN_BUILD", ROOT / "build"))
PLOT = ROOT / "launch" / "plot_run.py"
sys.path.insert(0, str(ROOT / "launch"))
import plot_run  # noqa: E402
import run_metrics  # noqa: E402


def step_line(s, loss, extra=None):
    rec = {"comm_s": 0.0, "grad_norm": 1.0 + 0.01 * s, "loss": loss, "lr": 0.001 * s,
           "mfu": 0.2 + 0.001 * s, "step": s, "tok_per_s": 1000.0 + s, "tokens": 100 * s}
    rec.update(extra or {})
    return json.dumps(rec)


def write_resumed(path):
    """Run A: steps 1..15 (step 7 skipped as non-finite), evaluations at 0, 10 and a checkpoint
    at 10; then a resume from the checkpoint of step 10 re-runs 11..20 with other losses
    (4.5 - 0.1 s), evaluates at 20 (bpb 1.5), a CORE at 20; the last line is cut off."""
    lines = [json.dumps({"step": 0, "val_bpb": 3.0, "val_loss": 4.0, "val_tokens": 256})]
    for s in range(1, 16):
        if s == 7:
            lines.append(json.dumps({"step": 7, "skipped": True, "loss": None, "grad_norm": None}))
            continue
        lines.append(step_line(s, 5.0 - 0.1 * s))
        if s == 10:
            lines.append(json.dumps({"step": 10, "val_bpb": 2.0, "val_loss": 2.5,
                                     "val_tokens": 256}))
            lines.append(json.dumps({"step": 10, "ckpt_pause_s": 0.5, "ckpt_wait_s": 0.0,
                                     "ckpt_async": False}))
    for s in range(11, 21):  # the resumed run
        lines.append(step_line(s, 4.5 - 0.1 * s))
    lines.append(json.dumps({"step": 20, "val_bpb": 1.5, "val_loss": 1.9, "val_tokens": 256}))
    lines.append(json.dumps({"step": 20, "core": 0.125, "core_centered": {"a": 0.1},
                             "core_accuracy": {"a": 0.3}}))
    path.write_text("\n".join(lines) + "\n" + '{"step":21,"loss":2.3,"lr":0.0')  # cut off
    return path


def write_plain(path, steps=10):
    """Run B: steps 1..N with no mfu field and no evaluations, with loss_smooth (the loss +
    0.25, a value told apart from the raw loss)."""
    lines = []
    for s in range(1, steps + 1):
        rec = json.loads(step_line(s, 6.0 - 0.2 * s, {"loss_smooth": 6.25 - 0.2 * s}))
        del rec["mfu"]
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def lines_of(ax):
    return ax.get_lines()


def panel(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


# ----------------------------------------------------------------------------- the reader

def test_reader_keeps_the_last_occurrence_and_drops_the_cut_line(tmp_path):
    run = run_metrics.read_run(write_resumed(tmp_path / "a.jsonl"), "a")
    steps = [r["step"] for r in run.steps]
    assert steps == [s for s in range(1, 21) if s != 7]
    loss = {r["step"]: r["loss"] for r in run.steps}
    assert loss[10] == pytest.approx(4.0) and loss[11] == pytest.approx(4.5 - 1.1)
    assert loss[15] == pytest.approx(4.5 - 1.5) and loss[20] == pytest.approx(2.5)
    assert [r["step"] for r in run.skipped] == [7]
    assert [(e["step"], e["val_bpb"]) for e in run.evals] == [(0, 3.0), (10, 2.0), (20, 1.5)]
    assert [c["step"] for c in run.cores] == [20] and [c["step"] for c in run.ckpts] == [10]
    assert run.restarts == 1 and run.superseded == 5  # steps 11..15 of the first attempt
    assert len(run.notes) == 1 and "a.jsonl:" in run.notes[0] and "incomplete" in run.notes[0]
    # Tokens at the evaluations: from the steps' tokens (100 per step).
    np.testing.assert_allclose(run.tokens_at([0, 10, 20, 22]), [0, 1000, 2000, 2200])


def test_reader_keeps_records_of_unknown_kinds_apart(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join([step_line(1, 5.0), json.dumps({"step": 1, "straggler": 3}),
                            json.dumps({"step": 1, "rank_ms": [1, 2]}),
                            json.dumps({"step": 1, "straggler": 2})]) + "\n")
    run = run_metrics.read_run(p)
    assert run.other == [{"step": 1, "rank_ms": [1, 2]}, {"step": 1, "straggler": 2}]
    assert run.superseded == 1 and len(run.steps) == 1


def test_reader_recovers_a_resume_appended_to_a_cut_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(step_line(1, 5.0) + "\n" + '{"step":2,"loss":4.' + step_line(2, 4.4) + "\n"
                 + step_line(3, 4.3) + "\n")
    run = run_metrics.read_run(p)
    assert [(r["step"], r["loss"]) for r in run.steps] == [(1, 5.0), (2, 4.4), (3, 4.3)]
    assert any(f"{p}:2" in n and "cut off" in n for n in run.notes), run.notes


@pytest.mark.parametrize("text,message", [
    ("", "empty"),
    ("\n\n", "empty"),
    ('not json at all\n', "holds no complete metrics line"),
    ('{"loss": 2.0}\n', ":1: not a vtrain metrics record"),
    ('[1, 2]\n', ":1: not a vtrain metrics record"),
])
def test_reader_refuses_files_without_a_record_naming_them(tmp_path, text, message):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(run_metrics.MetricsError) as e:
        run_metrics.read_run(p)
    assert str(p) in str(e.value) and message in str(e.value)


def test_run_arguments_names_and_directories(tmp_path):
    (tmp_path / "d12").mkdir()
    write_plain(tmp_path / "d12" / "metrics.jsonl")
    write_plain(tmp_path / "x.jsonl")
    runs = run_metrics.load_runs([str(tmp_path / "d12"), f"mine={tmp_path / 'x.jsonl'}",
                                  str(tmp_path / "x.jsonl")])
    assert [r.name for r in runs] == ["d12", "mine", "x"]
    assert runs[0].path == tmp_path / "d12" / "metrics.jsonl"
    runs = run_metrics.load_runs([str(tmp_path / "x.jsonl"), str(tmp_path / "x.jsonl")])
    assert [r.name for r in runs] == ["x", "x#2"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(run_metrics.MetricsError, match="empty: a directory with no metrics"):
        run_metrics.load_runs([str(tmp_path / "empty")])


# ----------------------------------------------------------------------------- the figures

def test_figure_curves_per_panel(tmp_path):
    a = run_metrics.read_run(write_resumed(tmp_path / "a.jsonl"), "a")
    b = run_metrics.read_run(write_plain(tmp_path / "b.jsonl"), "b")
    plt = run_metrics.pyplot()
    fig = plot_run.figure([a, b], "step", smooth=0)
    try:
        assert len(fig.axes) == 6
        counts = {ax.get_title(): len(lines_of(ax)) for ax in fig.axes}
        assert counts == {"training loss": 2, "validation bits per byte": 1, "throughput": 2,
                          "model FLOPs utilization": 1, "gradient norm (before clipping)": 2,
                          "learning rate (Muon)": 2}
        la, lb = lines_of(panel(fig, "training loss"))
        assert la.get_label() == "a" and lb.get_label() == "b"
        np.testing.assert_array_equal(la.get_xdata(), [s for s in range(1, 21) if s != 7])
        assert la.get_ydata()[-1] == pytest.approx(2.5)  # the resumed run's step 20
        (v,) = lines_of(panel(fig, "validation bits per byte"))
        np.testing.assert_array_equal(v.get_xdata(), [0, 10, 20])
        np.testing.assert_allclose(v.get_ydata(), [3.0, 2.0, 1.5])
        (m,) = lines_of(panel(fig, "model FLOPs utilization"))
        assert m.get_ydata()[0] == pytest.approx(100 * 0.201)  # percent
        # The skipped step is a tick on the loss panel (a scatter, not a curve).
        assert len(panel(fig, "training loss").collections) == 1
    finally:
        plt.close(fig)
    fig = plot_run.figure([a, b], "tokens", smooth=0.5)
    try:
        loss = lines_of(panel(fig, "training loss"))
        assert len(loss) == 4  # raw (faint) and smoothed per run
        np.testing.assert_allclose(loss[0].get_xdata(), [100 * s for s in range(1, 21) if s != 7])
        assert loss[0].get_alpha() == pytest.approx(0.25) and loss[1].get_label() == "a"
        (v,) = lines_of(panel(fig, "validation bits per byte"))
        np.testing.assert_allclose(v.get_xdata(), [0, 1000, 2000])
        assert panel(fig, "training loss").get_xlabel() == "tokens"
    finally:
        plt.close(fig)


def test_panel_without_data_says_so(tmp_path):
    b = run_metrics.read_run(write_plain(tmp_path / "b.jsonl"), "b")
    plt = run_metrics.pyplot()
    fig = plot_run.figure([b], "step", smooth=None)  # auto: 10 steps, no smoothing
    try:
        ax = panel(fig, "validation bits per byte")
        assert not lines_of(ax) and "no val_bpb in this run" in [t.get_text() for t in ax.texts]
        assert len(lines_of(panel(fig, "training loss"))) == 1
    finally:
        plt.close(fig)
    assert plot_run.loss_beta(None, 10) == 0 and plot_run.loss_beta(None, 5000) == \
        pytest.approx(1 - 2 / 101)


# ----------------------------------------------------------------------------- the command

def run_plot(*args):
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def cells(md, label):
    """The cells after `label` in its row of the summary table ("" for the header)."""
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in md.splitlines()
            if l.startswith("|")]
    return next(r[1:] for r in rows if r[0] == label)


def test_cli_writes_pngs_and_summary(tmp_path):
    a = write_resumed(tmp_path / "a.jsonl")
    (tmp_path / "b").mkdir()
    write_plain(tmp_path / "b" / "metrics.jsonl")
    out = tmp_path / "plots"
    r = run_plot(f"resumed={a}", tmp_path / "b", "--out", out, "--smooth", "0")
    assert r.returncode == 0, r.stderr
    assert "incomplete" in r.stderr and f"{a}:" in r.stderr  # the cut-off line, said
    for name in ("steps.png", "tokens.png"):
        assert png_size(out / name) == (1500, 800)
    md = (out / "summary.md").read_text()
    assert md in r.stdout
    assert cells(md, "") == ["resumed", "b"]
    assert cells(md, "steps") == ["20", "10"]
    assert cells(md, "tokens") == ["2.00k", "1.00k"]
    assert cells(md, "final train loss") == ["2.5000 (step 20)", "4.0000 (step 10)"]
    # vtrain's loss_smooth where the file has it (the plain run's records carry it, the
    # resumed run's do not).
    assert cells(md, "final train loss, smoothed") == ["-", "4.2500 (step 10)"]
    assert cells(md, "lowest train loss") == ["2.5000 (step 20)", "4.0000 (step 10)"]
    assert cells(md, "final val bpb") == ["1.5000 (step 20)", "-"]
    assert cells(md, "lowest val bpb") == ["1.5000 (step 20)", "-"]
    assert cells(md, "final val loss") == ["1.9000", "-"]
    assert cells(md, "evaluations") == ["3", "0"]
    # tok/s is 1000 + s and MFU 0.2 + 0.001 s over the 19 applied steps (1..20 but 7): the
    # median is step 11's; over 1..10 the median is 1,005.5.
    assert cells(md, "throughput, median (tok/s)") == ["1,011", f"{1005.5:,.0f}"]
    assert cells(md, "MFU, median") == ["21.1%", "-"]
    assert cells(md, "skipped steps (non-finite)") == ["1 (step 7)", "0"]
    assert cells(md, "CORE (last)") == ["0.1250 (step 20)", "-"]
    assert cells(md, "checkpoints logged") == ["1", "0"]
    assert cells(md, "resumes that re-ran steps") == ["1 (5 lines superseded)", "0"]
    # Time in steps: sum over steps of 100 tokens / (1000 + s) s (step 8 carries 7's tokens).
    want = sum(100 / (1000 + s) for s in range(1, 21) if s != 7) + 100 / 1008
    assert cells(md, "time in training steps")[0] == f"{round(want)}s"
    assert "![steps](steps.png)" in md and "![tokens](tokens.png)" in md


@pytest.mark.parametrize("name,text,message", [
    ("missing.jsonl", None, "missing.jsonl: no such file"),
    ("e.jsonl", "", "e.jsonl: empty"),
    ("bad.jsonl", '{"step": 2, "lo\n[1]\n\x00\x01\n', "bad.jsonl: holds no complete metrics line"),
])
def test_cli_errors_name_the_file(tmp_path, name, text, message):
    target = tmp_path / name
    if text is not None:
        target.write_text(text)
    r = run_plot(target, "--out", tmp_path / "o")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o" / "steps.png").exists()


def test_cli_refuses_a_bad_smooth(tmp_path):
    r = run_plot(write_plain(tmp_path / "b.jsonl"), "--smooth", "1.5", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--smooth 1.5" in r.stderr


# ----------------------------------------------------------------------------- a real run

def test_real_tiny_run(tmp_path):
    vtrain = BUILD / "vtrain"
    if not vtrain.exists():
        pytest.fail(f"{vtrain} not found; build the vtrain target first (VTRAIN_BUILD={BUILD})")
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(40)]
    (tmp_path / "c.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) + "."
                                              for _ in range(400)))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    (tmp_path / "run").mkdir()
    r = subprocess.run([str(vtrain), "prepare", "--input", str(tmp_path / "c.txt"), "--out",
                        str(tmp_path / "data"), "--tokenizer", "bpe:300", "--val-fraction", "0.1"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(vtrain), "train", "--data", str(tmp_path / "data"), "--layers", "2",
                        "--dim", "64", "--heads", "2", "--seq-len", "32", "--micro-batch", "2",
                        "--eval-tokens", "256", "--steps", "12", "--eval-every", "6",
                        "--metrics", str(tmp_path / "run" / "metrics.jsonl")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "plots"
    r = run_plot(tmp_path / "run", "--out", out)
    assert r.returncode == 0, r.stderr
    assert png_size(out / "steps.png") == (1500, 800)
    md = (out / "summary.md").read_text()
    assert cells(md, "") == ["run"] and cells(md, "steps") == ["12"]
    assert cells(md, "evaluations") == ["3"]  # steps 0, 6 and the final one
    assert float(cells(md, "final val bpb")[0].split()[0]) < float(
        json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])["val_bpb"])
    assert cells(md, "MFU, median")[0].endswith("%")
