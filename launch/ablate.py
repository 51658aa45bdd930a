#!/usr/bin/env python3
# launch/ablate.py owns value-mode ablations: it trains several --value modes with `vtrain train`
# on the same data directory, seed and token budget, then summarizes them as a markdown table
# (ablate.md) and a plot of validation bits-per-byte against step (ablate.png).
"""Train a list of value modes under identical settings and compare them.

    python launch/ablate.py --data DATADIR --modes baseline,resformer-identity,v1,x0v,bov \\
        --steps 200 --out runs/ablate [--jobs N] -- <extra `vtrain train` arguments>

Each mode runs `vtrain train --data DATADIR --value MODE --steps N --seed S --eval-every E
--metrics OUT/MODE.jsonl --ckpt-dir OUT/ckpt/MODE <extra>`; its stdout/stderr go to
OUT/MODE.log. Arguments after `--` are passed to every run unchanged (model size, batch, ...).
Standard library + numpy + matplotlib only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Flags that ablate.py sets itself for every run; giving them after `--` would make runs differ.
RESERVED = {"--data", "--value", "--steps", "--seed", "--metrics", "--ckpt-dir", "--resume"}
PROGRESS_RE = re.compile(r"^step (\d+)/(\d+) \| loss ([\d.naif+-]+) .*\| ([\d.]+[kM]?) tok/s")
EVAL_RE = re.compile(r"^eval step (\d+) \| val loss ([\d.naif+-]+) \| val bpb ([\d.naif+-]+)")
PARAMS_RE = re.compile(r"\| ([\d.]+)M params \|")


class AblateError(Exception):
    """A failure the user has to act on; printed without a traceback."""


def default_vtrain() -> Path:
    build = os.environ.get("VTRAIN_BUILD")
    return Path(build) / "vtrain" if build else ROOT / "build" / "vtrain"


def parse_args(argv: list[str]):
    if "--" in argv:
        cut = argv.index("--")
        own, extra = argv[:cut], argv[cut + 1:]
    else:
        own, extra = argv, []
    p = argparse.ArgumentParser(
        description="Train several value modes on the same data, seed and token budget, then "
                    "tabulate and plot their validation loss / bits per byte.",
        usage="%(prog)s --data DATADIR --modes M1,M2,... --steps N --out DIR [options] "
              "[-- extra vtrain train args]")
    p.add_argument("--data", required=True, help="data directory made by `vtrain prepare`")
    p.add_argument("--modes", required=True,
                   help="comma-separated value modes, e.g. baseline,resformer-identity,v1,x0v,bov")
    p.add_argument("--steps", type=int, required=True, help="training steps of every run")
    p.add_argument("--out", required=True, help="output directory (JSONL, logs, ablate.md/png)")
    p.add_argument("--seed", type=int, default=1337, help="seed shared by every run (1337)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="steps between evaluations (default: steps/10, at least 1)")
    p.add_argument("--jobs", type=int, default=1, help="runs at the same time (1)")
    p.add_argument("--threads", type=int, default=None,
                   help="per run: OMP_NUM_THREADS=N and OPENBLAS_NUM_THREADS=1 (vtrain's OpenMP "
                        "kernels and the pthread OpenBLAS otherwise both spawn a thread per core "
                        "and oversubscribe). Default: CPUs/jobs when --jobs > 1, else the "
                        "environment as it is")
    p.add_argument("--vtrain", default=str(default_vtrain()),
                   help="vtrain binary ($VTRAIN_BUILD/vtrain, else <repo>/build/vtrain)")
    p.add_argument("--no-ckpt", action="store_true",
                   help="do not keep a final checkpoint per mode in OUT/ckpt/MODE")
    p.add_argument("--keep-going", action="store_true",
                   help="when a run fails, finish the others and report it in the table "
                        "(exit status stays non-zero)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="train steps ignored when taking the median tok/s (default: min(5, steps/4))")
    args = p.parse_args(own)
    args.extra = extra
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes:
        p.error("--modes lists no mode")
    if len(set(args.modes)) != len(args.modes):
        p.error(f"--modes lists a mode twice: {args.modes}")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    for a in extra:
        flag = a.split("=", 1)[0]
        if flag in RESERVED:
            p.error(f"{flag} after `--` is set by ablate.py itself (use its own options); "
                    f"reserved: {' '.join(sorted(RESERVED))}")
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be >= 1")
    if args.threads is None and args.jobs > 1:
        args.threads = max(1, (os.cpu_count() or 1) // args.jobs)
    if args.eval_every is None:
        args.eval_every = max(1, args.steps // 10)
    if args.warmup_steps is None:
        args.warmup_steps = min(5, args.steps // 4)
    return args


# ----------------------------------------------------------------------------- one run

class Run:
    """One `vtrain train` subprocess for one value mode, with its live progress."""

    def __init__(self, mode: str, args, out: Path):
        self.mode = mode
        self.metrics = out / f"{mode}.jsonl"
        self.log = out / f"{mode}.log"
        self.ckpt = None if args.no_ckpt else out / "ckpt" / mode
        self.cmd = [args.vtrain, "train", "--data", args.data, "--value", mode,
                    "--steps", str(args.steps), "--seed", str(args.seed),
                    "--eval-every", str(args.eval_every), "--metrics", str(self.metrics)]
        if self.ckpt is not None:
            self.cmd += ["--ckpt-dir", str(self.ckpt)]
        self.cmd += args.extra
        self.env = dict(os.environ)
        if args.threads is not None:
            self.env.update(OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS="1")
        self.proc: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None
        self.lines: list[str] = []
        self.step = 0
        self.total = args.steps
        self.loss = float("nan")
        self.tok_s = ""
        self.val_bpb = float("nan")
        self.params_m: float | None = None
        self.t0 = self.t1 = 0.0
        self.returncode: int | None = None

    def start(self):
        if self.ckpt is not None and self.ckpt.exists():
            for f in self.ckpt.glob("step_*.h5*"):  # a fresh run must not mix old checkpoints
                f.unlink()
            (self.ckpt / "latest").unlink(missing_ok=True)
        self.t0 = time.time()
        self.logf = open(self.log, "w")
        self.logf.write("$ " + shlex.join(self.cmd) + "\n")
        self.logf.flush()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, env=self.env)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.logf.write(line)
            self.logf.flush()
            line = line.rstrip("\n")
            self.lines.append(line)
            if len(self.lines) > 400:
                del self.lines[:200]
            if m := PROGRESS_RE.match(line):
                self.step, self.total = int(m.group(1)), int(m.group(2))
                self.loss, self.tok_s = float(m.group(3)), m.group(4)
            elif m := EVAL_RE.match(line):
                self.val_bpb = float(m.group(3))
            elif self.params_m is None and (m := PARAMS_RE.search(line)):
                self.params_m = float(m.group(1))

    def poll(self) -> bool:
        """True once the process has exited and its output is drained."""
        if self.proc is None or self.proc.poll() is None:
            return False
        self.thread.join()
        if self.returncode is None:
            self.returncode = self.proc.returncode
            self.t1 = time.time()
            self.logf.close()
        return True

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def status(self) -> str:
        s = f"{self.mode} {self.step}/{self.total}"
        if self.step:
            s += f" loss {self.loss:.3f} {self.tok_s} tok/s"
        if not math.isnan(self.val_bpb):
            s += f" bpb {self.val_bpb:.3f}"
        return s

    def failure_text(self) -> str:
        tail = "\n".join("    " + l for l in self.lines[-25:]) or "    (no output)"
        return (f"run '{self.mode}' failed with exit status {self.returncode}\n"
                f"  command: {shlex.join(self.cmd)}\n  full log: {self.log}\n"
                f"  last lines of its output (stderr included):\n{tail}")


# ----------------------------------------------------------------------------- summaries

def read_metrics(path: Path):
    train, evals = [], []
    if not path.exists():
        return train, evals
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise AblateError(f"{path}:{n}: not JSON ({e})") from None
        if "val_bpb" in rec:
            evals.append(rec)
        elif "loss" in rec:
            train.append(rec)
    return train, evals


def count_params(vtrain: str, ckpt_dir: Path | None) -> int | None:
    """Exact stored parameter count from `vtrain ckpt inspect` on the run's last checkpoint."""
    if ckpt_dir is None or not (ckpt_dir / "latest").exists():
        return None
    name = (ckpt_dir / "latest").read_text().strip()
    r = subprocess.run([vtrain, "ckpt", "inspect", str(ckpt_dir / name)], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        return None
    total, found = 0, False
    for line in r.stdout.splitlines():  # "    /model/blocks.0.attn.wq  (128, 128)  checksum ..."
        m = re.match(r"^\s+/model/(\S+)\s+\(([\d, ]+)\)", line)
        if m:
            total += int(np.prod([int(d) for d in m.group(2).split(",")]))
            found = True
    return total if found else None


def summarize(run: Run, args) -> dict:
    train, evals = read_metrics(run.metrics)
    row = {"mode": run.mode, "ok": run.returncode == 0, "train": train, "evals": evals,
           "seconds": run.t1 - run.t0}
    row["params"] = count_params(args.vtrain, run.ckpt) if row["ok"] else None
    if row["params"] is None and run.params_m is not None:
        row["params"] = int(round(run.params_m * 1e6))
    last = evals[-1] if evals else {}
    row["val_loss"] = last.get("val_loss", float("nan"))
    row["val_bpb"] = last.get("val_bpb", float("nan"))
    row["eval_step"] = last.get("step")
    rates = [r["tok_per_s"] for r in train if r["step"] > args.warmup_steps and "tok_per_s" in r]
    if not rates:
        rates = [r["tok_per_s"] for r in train if "tok_per_s" in r]
    row["tok_s"] = float(np.median(rates)) if rates else float("nan")
    row["tokens"] = train[-1]["tokens"] if train else 0
    row["final_loss"] = train[-1]["loss"] if train else float("nan")
    return row


def fmt_params(n) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.3f}M" if n < 1e8 else f"{n / 1e9:.3f}B"


def fmt(x, spec=".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table(rows: list[dict]) -> tuple[str, str]:
    """Markdown table and the name of the reference mode of the delta column."""
    ok = [r for r in rows if r["ok"] and not math.isnan(r["val_bpb"])]
    ref = next((r for r in ok if r["mode"] == "baseline"), ok[0] if ok else None)
    ref_name = ref["mode"] if ref else "baseline"
    head = ("| mode | params | final val loss | final val bpb | "
            f"delta bpb vs {ref_name} | tok/s |")
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['mode']} | {fmt_params(r['params'])} | failed | failed | - | - |")
            continue
        delta = r["val_bpb"] - ref["val_bpb"] if ref and not math.isnan(r["val_bpb"]) else None
        lines.append(f"| {r['mode']} | {fmt_params(r['params'])} | {fmt(r['val_loss'])} | "
                     f"{fmt(r['val_bpb'])} | {fmt(delta, '+.4f')} | {fmt(r['tok_s'], ',.0f')} |")
    return "\n".join(lines), ref_name


def plot(rows: list[dict], path: Path, title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        if r["evals"]:
            ax1.plot([e["step"] for e in r["evals"]], [e["val_bpb"] for e in r["evals"]],
                     marker="o", markersize=3, label=r["mode"])
        if r["train"]:
            steps = np.array([t["step"] for t in r["train"]])
            loss = np.array([t["loss"] for t in r["train"]], dtype=float)
            k = max(1, len(loss) // 50)  # light smoothing: moving average over ~2% of the run
            smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
            ax2.plot(steps[k - 1:], smooth, label=r["mode"])
    ax1.set(xlabel="step", ylabel="validation bits per byte", title="val bpb (lower is better)")
    ax2.set(xlabel="step", ylabel="train loss (nats)", title="train loss (moving average)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- driver

def run_all(runs: list[Run], args) -> list[Run]:
    """Runs up to --jobs at a time; returns the failed runs (stops at the first unless
    --keep-going). Prints one progress line per run: live on a terminal, every 10% otherwise."""
    tty = sys.stdout.isatty()
    pending, active, finished, failed = list(runs), [], 0, []
    last_report: dict[str, int] = {}
    last_tty = 0.0
    while pending or active:
        while pending and len(active) < args.jobs:
            r = pending.pop(0)
            r.start()
            print(f"[{finished + len(active) + 1}/{len(runs)}] {r.mode}: started "
                  f"(log {r.log})", flush=True)
            active.append(r)
        time.sleep(0.2)
        for r in list(active):
            if not r.poll():
                continue
            active.remove(r)
            finished += 1
            if tty:
                print("\r\033[K", end="")
            if r.returncode == 0:
                print(f"[{finished}/{len(runs)}] {r.mode}: done in {r.t1 - r.t0:.0f}s | "
                      f"{r.status()}", flush=True)
            else:
                failed.append(r)
                print(f"[{finished}/{len(runs)}] {r.mode}: FAILED\n{r.failure_text()}",
                      file=sys.stderr, flush=True)
                if not args.keep_going:
                    for other in active + pending:
                        other.kill()
                        if other.proc is not None:
                            other.poll()
                    return failed
        if tty:
            if active and time.time() - last_tty > 0.5:
                line = " | ".join(r.status() for r in active)
                cols = max(40, os.get_terminal_size().columns - 1) if tty else 200
                print("\r\033[K" + line[:cols], end="", flush=True)
                last_tty = time.time()
        else:
            for r in active:
                tenth = (10 * r.step) // max(1, r.total)
                if r.step and tenth > last_report.get(r.mode, 0):
                    last_report[r.mode] = tenth
                    print(f"  {r.status()}", flush=True)
    return failed


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    vtrain = Path(args.vtrain)
    if not vtrain.is_file() or not os.access(vtrain, os.X_OK):
        raise AblateError(f"vtrain binary {vtrain} not found or not executable; build it "
                          "(cmake --build build --target vtrain) or pass --vtrain / VTRAIN_BUILD")
    if not Path(args.data).is_dir():
        raise AblateError(f"--data {args.data} is not a directory; make one with "
                          "`vtrain prepare --input FILE --out DATADIR --tokenizer bpe:N`")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [Run(m, args, out) for m in args.modes]
    print(f"ablate: {len(runs)} modes x {args.steps} steps, seed {args.seed}, data {args.data}, "
          f"eval every {args.eval_every}, jobs {args.jobs}"
          + (f", {args.threads} thread(s) per run" if args.threads else "")
          + (f"\n  extra: {shlex.join(args.extra)}" if args.extra else ""), flush=True)
    t0 = time.time()
    try:
        failed = run_all(runs, args)
    except KeyboardInterrupt:
        for r in runs:
            r.kill()
        raise
    if failed and not args.keep_going:
        raise AblateError(f"stopped: run '{failed[0].mode}' failed (see above); no table written")

    rows = [summarize(r, args) for r in runs if r.returncode is not None]
    md, ref = table(rows)
    tokens = max((r["tokens"] for r in rows), default=0)
    budget = (f"{args.steps} steps, {tokens:,} training tokens per run, seed {args.seed}, "
              f"data `{args.data}`")
    print("\n" + md + "\n")
    print(f"({budget}; tok/s = median over steps > {args.warmup_steps}; "
          f"total {time.time() - t0:.0f}s)")
    cmdline = shlex.join([sys.executable, "launch/ablate.py", *argv])
    doc = [
        "# Value-mode ablation", "",
        f"- budget: {budget}",
        f"- extra `vtrain train` args: `{shlex.join(args.extra) or '(none)'}`",
        f"- evaluation every {args.eval_every} steps; final values are the last evaluation "
        "(after the last step)",
        f"- delta bpb is relative to `{ref}` (negative = better)",
        f"- tok/s: median of per-step training throughput after {args.warmup_steps} warm-up "
        f"steps; runs were {'sequential' if args.jobs == 1 else f'{args.jobs} at a time'}"
        + (f", {args.threads} thread(s) each" if args.threads else ""),
        f"- command: `{cmdline}`", "", md, "",
        "![val bpb vs step](ablate.png)", ""]
    (out / "ablate.md").write_text("\n".join(doc))
    plot(rows, out / "ablate.png", f"{budget}  |  {shlex.join(args.extra)}")
    print(f"wrote {out / 'ablate.md'}, {out / 'ablate.png'} and {len(rows)} metrics files")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AblateError as e:
        print(f"ablate.py: error: {e}", file=sys.stderr)
        sys.exit(1)
