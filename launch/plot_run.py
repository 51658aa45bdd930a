#!/usr/bin/env python3
# launch/plot_run.py owns drawing training runs from their metrics files (docs/usage.md
# "Plotting runs"): loss, validation bits per byte, throughput, MFU, gradient norm and learning
# rate against steps (steps.png) and against tokens (tokens.png), one curve per run, and a
# Markdown summary of each run at a glance (summary.md). Reading the files (resumed runs,
# truncated lines, record kinds) is launch/run_metrics.py's. Standard library + numpy +
# matplotlib.
"""Plot one or several vtrain runs from their metrics files.

    python launch/plot_run.py runs/a/metrics.jsonl [bov=runs/b ...] --out runs/plots

A RUN is a metrics file written by `vtrain train --metrics FILE`, or a directory holding one
(metrics.jsonl, or its only *.jsonl); `NAME=RUN` labels it NAME (default: the directory's name,
or the file's stem). Writes OUT/steps.png, OUT/tokens.png and OUT/summary.md, and prints the
summary. A resumed run that ran steps again counts the last occurrence of each step.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_metrics  # noqa: E402  (launch/run_metrics.py)
from run_metrics import MetricsError, Run  # noqa: E402

# The panels: (key, record kind, title, y label, scale of the values).
PANELS = [
    ("loss", "step", "training loss", "loss (nats/token)", 1.0),
    ("val_bpb", "eval", "validation bits per byte", "val bpb", 1.0),
    ("tok_per_s", "step", "throughput", "tokens / s", 1.0),
    ("mfu", "step", "model FLOPs utilization", "MFU (%)", 100.0),
    ("grad_norm", "step", "gradient norm (before clipping)", "grad norm", 1.0),
    ("lr", "step", "learning rate (Muon)", "lr", 1.0),
]
FIGSIZE = (15.0, 8.0)  # inches; at DPI this is the PNG's size in pixels
DPI = 100


def series(run: Run, key: str, kind: str, x: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of a metric of one run, x "step" or "tokens" (points without tokens left out)."""
    steps, ys = run.values(key, run.evals if kind == "eval" else run.steps)
    if x == "step":
        return steps.astype(np.float64), ys
    toks = run.tokens_at(steps)
    ok = ~np.isnan(toks)
    return toks[ok], ys[ok]


def loss_beta(smooth: float | None, n: int) -> float:
    """The loss curve's EMA factor: `smooth` as given, or (None, "auto") one whose span is about
    2% of the run's n steps (no smoothing under 100 steps)."""
    if smooth is not None:
        return smooth
    k = max(1, n // 50)
    return 1.0 - 2.0 / (k + 1)


def figure(runs: list[Run], x: str = "step", smooth: float | None = None,
           title: str | None = None):
    """The figure of the six panels against `x` ("step" or "tokens"): one line per run in each
    panel that the run has the metric for; the loss, when smoothed (loss_beta > 0), is its
    exponential moving average drawn over the raw curve (drawn faint, a second line).
    Skipped steps are ticks on the loss panel's floor. A panel no run has data for says so.
    Returns the matplotlib Figure (the caller saves and closes it)."""
    plt = run_metrics.pyplot()
    fig, axes = plt.subplots(2, 3, figsize=FIGSIZE, dpi=DPI)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    xlabel = "step" if x == "step" else "tokens"
    for ax, (key, kind, name, ylabel, scale) in zip(axes.flat, PANELS):
        drawn = 0
        for i, run in enumerate(runs):
            color = colors[i % len(colors)]
            xs, ys = series(run, key, kind, x)
            if len(xs) == 0:
                continue
            ys = ys * scale
            drawn += 1
            if kind == "eval":
                ax.plot(xs, ys, "o-", markersize=3, color=color, label=run.name)
            elif key == "loss" and loss_beta(smooth, len(ys)) > 0:
                ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(xs, run_metrics.ema(ys, loss_beta(smooth, len(ys))), color=color,
                        label=run.name)
            else:
                ax.plot(xs, ys, color=color, linewidth=1.0, label=run.name)
            if key == "loss" and run.skipped:
                sx = np.array([r["step"] for r in run.skipped], dtype=np.float64)
                if x == "tokens":
                    sx = run.tokens_at(sx)
                ax.scatter(sx, np.full(len(sx), 0.0), marker="|", s=80, color=color,
                           transform=ax.get_xaxis_transform(), clip_on=False)
        ax.set(title=name, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        if drawn:
            if len(runs) > 1 or kind == "eval":
                ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, f"no {key} in {'these runs' if len(runs) > 1 else 'this run'}",
                    ha="center", va="center", transform=ax.transAxes, color="grey")
    if x == "tokens":
        for ax in axes.flat:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    fig.suptitle(title or f"{', '.join(r.name for r in runs)} against "
                 f"{'steps' if x == 'step' else 'tokens'}", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- summary

def fmt(v, spec=".4f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def si(v) -> str:
    """12345678 -> 12.35M."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.2f}{unit}"
    return f"{v:.0f}"


def duration(s: float) -> str:
    if math.isnan(s):
        return "-"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def stats(run: Run) -> dict:
    """The numbers of a run at a glance (NaN / None where the run has no such records)."""
    nan = float("nan")
    out: dict = {"file": str(run.path)}
    steps, loss = run.values("loss")
    out["steps"] = int(run.steps[-1]["step"]) if run.steps else None
    if run.skipped and (out["steps"] is None or run.skipped[-1]["step"] > out["steps"]):
        out["steps"] = int(run.skipped[-1]["step"])
    out["step_lines"] = len(run.steps)
    _, toks = run.values("tokens")
    out["tokens"] = float(toks[-1]) if len(toks) else nan
    out["final_loss"] = (float(loss[-1]), int(steps[-1])) if len(loss) else (nan, None)
    # vtrain's own smoothed loss (loss_smooth: nanochat's EMA), in files that have it.
    ss, smooth = run.values("loss_smooth")
    out["final_smooth"] = (float(smooth[-1]), int(ss[-1])) if len(smooth) else (nan, None)
    i = int(np.argmin(loss)) if len(loss) else None
    out["best_loss"] = (float(loss[i]), int(steps[i])) if i is not None else (nan, None)
    es, bpb = run.values("val_bpb", run.evals)
    _, vloss = run.values("val_loss", run.evals)
    out["evals"] = len(run.evals)
    out["final_bpb"] = (float(bpb[-1]), int(es[-1])) if len(bpb) else (nan, None)
    out["final_val_loss"] = float(vloss[-1]) if len(vloss) else nan
    j = int(np.argmin(bpb)) if len(bpb) else None
    out["best_bpb"] = (float(bpb[j]), int(es[j])) if j is not None else (nan, None)
    _, tps = run.values("tok_per_s")
    out["tok_s"] = float(np.median(tps)) if len(tps) else nan
    _, mfu = run.values("mfu")
    out["mfu"] = float(np.median(mfu)) if len(mfu) else nan
    _, gn = run.values("grad_norm")
    out["grad_norm"] = float(np.median(gn)) if len(gn) else nan
    # The time in training steps: each step's tokens over its throughput.
    ts, tt = run.values("tokens")
    rate = dict(zip(*run.values("tok_per_s")))
    prev, seconds = 0.0, 0.0
    for s, t in zip(ts, tt):
        if rate.get(s, 0) > 0:
            seconds += (t - prev) / rate[s]
        prev = t
    out["train_seconds"] = seconds if len(ts) and rate else nan
    out["skipped"] = [int(r["step"]) for r in run.skipped]
    cs, core = run.values("core", run.cores)
    out["core"] = (float(core[-1]), int(cs[-1])) if len(core) else (nan, None)
    out["ckpts"] = len(run.ckpts)
    out["restarts"], out["superseded"] = run.restarts, run.superseded
    return out


def at(pair, spec=".4f") -> str:
    v, step = pair
    return "-" if step is None else f"{fmt(v, spec)} (step {step})"


def summary(runs: list[Run], images=("steps.png", "tokens.png")) -> str:
    """Markdown: one column per run, a row per quantity, then notes and the plots."""
    st = [stats(r) for r in runs]

    def skipped(s):
        n = len(s["skipped"])
        if n == 0:
            return "0"
        shown = ", ".join(map(str, s["skipped"][:5])) + (", ..." if n > 5 else "")
        return f"{n} (step {shown})"

    rows = [
        ("steps", lambda s: "-" if s["steps"] is None else str(s["steps"])),
        ("tokens", lambda s: si(s["tokens"])),
        ("final train loss", lambda s: at(s["final_loss"])),
        ("final train loss, smoothed", lambda s: at(s["final_smooth"])),
        ("lowest train loss", lambda s: at(s["best_loss"])),
        ("final val bpb", lambda s: at(s["final_bpb"])),
        ("lowest val bpb", lambda s: at(s["best_bpb"])),
        ("final val loss", lambda s: fmt(s["final_val_loss"])),
        ("evaluations", lambda s: str(s["evals"])),
        ("throughput, median (tok/s)", lambda s: fmt(s["tok_s"], ",.0f")),
        ("MFU, median", lambda s: fmt(100 * s["mfu"], ".1f") + ("%" if not math.isnan(s["mfu"]) else "")),
        ("grad norm, median", lambda s: fmt(s["grad_norm"], ".3f")),
        ("time in training steps", lambda s: duration(s["train_seconds"])),
        ("skipped steps (non-finite)", skipped),
        ("CORE (last)", lambda s: at(s["core"])),
        ("checkpoints logged", lambda s: str(s["ckpts"])),
        ("resumes that re-ran steps", lambda s: f"{s['restarts']} ({s['superseded']} lines "
                                                 "superseded)" if s["restarts"] else "0"),
    ]
    lines = ["# Runs at a glance", "",
             "| | " + " | ".join(r.name for r in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(s) for s in st) + " |")
    lines.append("")
    for r, s in zip(runs, st):
        lines.append(f"- {r.name}: `{s['file']}`")
        lines.extend(f"  - note: {n}" for n in r.notes)
    lines.append("")
    lines.append("The throughput and MFU are medians over the training steps; the time in "
                 "training steps adds each step's tokens over its throughput (evaluations and "
                 "checkpoints left out). A step that a resumed run ran again counts once, as it "
                 "was last logged.")
    if images:
        lines += [""] + [f"![{Path(i).stem}]({i})" for i in images]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Plot vtrain runs (loss, val bpb, tok/s, MFU, grad norm, lr against steps "
                    "and tokens) and summarize them in Markdown.",
        usage="%(prog)s RUN [RUN ...] [--out DIR] [--smooth B|auto] [--title T]")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="[NAME=]metrics file of `vtrain train --metrics`, or a directory "
                        "holding one")
    p.add_argument("--out", default="plots",
                   help="output directory for steps.png, tokens.png, summary.md (default plots)")
    p.add_argument("--smooth", default="auto",
                   help="EMA factor B of the loss curve, 0 <= B < 1 (0: the raw curve only), or "
                        "auto: a span of about 2%% of the run's steps (default)")
    p.add_argument("--title", default=None, help="title over the plots")
    a = p.parse_args(argv)
    if a.smooth == "auto":
        a.smooth = None
    else:
        try:
            a.smooth = float(a.smooth)
        except ValueError:
            p.error(f"--smooth {a.smooth}: not a number (or auto)")
        if not 0 <= a.smooth < 1:
            p.error(f"--smooth {a.smooth}: must be in [0, 1)")
    return a


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        runs = run_metrics.load_runs(args.runs)
    except MetricsError as e:
        print(f"plot_run.py: error: {e}", file=sys.stderr)
        return 2
    for r in runs:
        for n in r.notes:
            print(f"note: {n}", file=sys.stderr)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"plot_run.py: error: --out {out} exists and is not a directory; choose a "
              f"directory for steps.png, tokens.png and summary.md", file=sys.stderr)
        return 2
    plt = run_metrics.pyplot()
    md = summary(runs)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for x, name in (("step", "steps.png"), ("tokens", "tokens.png")):
            fig = figure(runs, x, args.smooth, args.title)
            fig.savefig(out / name, dpi=DPI)
            plt.close(fig)
        (out / "summary.md").write_text(md)
    except OSError as e:
        print(f"plot_run.py: error: --out {out}: cannot write {e.filename or out} "
              f"({e.strerror})", file=sys.stderr)
        return 2
    print(md)
    print(f"wrote {out / 'steps.png'}, {out / 'tokens.png'} and {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
