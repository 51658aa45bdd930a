#!/usr/bin/env python3
# launch/ablate.py owns ablations: it trains several value modes and/or block shapes (each
# optionally with flags, over several seeds and depths) with `vtrain train` on the same data
# directory and token budget, then summarizes them as a markdown table (ablate.md: mean and
# spread over seeds, parameters, throughput relative to the reference arm, each arm's paired
# delta against the reference with its 95% interval and a verdict against the published
# ordering: launch/paired_stats.py) and a plot of validation bits-per-byte against step with the
# paired deltas as error bars (ablate.png).
"""Train a list of value modes and/or block shapes under identical settings and compare them.

    python launch/ablate.py --data DATADIR --modes baseline,resformer-identity,v1,x0v,bov \\
        --steps 200 --out runs/ablate [--seeds 1,2,3] [--jobs N] -- <extra `vtrain train` args>
    python launch/ablate.py --data DATADIR --blocks prenorm,parallel,vskipinit,sas,sas-p \\
        --depths 8,16 --steps 200 --out runs/blocks -- <extra args>

An arm is NAME[+flag[=value]...]: in --modes NAME is a value mode, in --blocks a block shape;
each `+flag=value` adds `--flag value` (`+flag` alone adds `--flag`) to that arm only, e.g.
`baseline+dense`, `sas-p+norm=none`, `sas+attn-bias=espa`. With both --modes and --blocks every
mode runs with every block. Each (arm, depth, seed) runs `vtrain train --data DATADIR --value
MODE [--block B] [--layers D] --steps N --seed S --eval-every E --metrics OUT/RUN.jsonl
--ckpt-dir OUT/ckpt/RUN <arm flags> <extra>`; its output goes to OUT/RUN.log. Arguments after
`--` are passed to every run unchanged (model size, batch, ...). Standard library + numpy +
matplotlib only.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ablate_match  # noqa: E402  (launch/ablate_match.py)
import paired_stats  # noqa: E402  (launch/paired_stats.py)
import run_metrics  # noqa: E402  (launch/run_metrics.py)

ROOT = Path(__file__).resolve().parents[1]
# Flags that ablate.py sets itself for every run; giving them after `--` would make runs differ.
RESERVED = {"--data", "--value", "--steps", "--seed", "--metrics", "--ckpt-dir", "--resume",
            "--block"}
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
    p.add_argument("--modes", default=None,
                   help="comma-separated value-mode arms, e.g. baseline,resformer-identity,v1,"
                        "baseline+dense (default: baseline when --blocks is given)")
    p.add_argument("--blocks", default=None,
                   help="comma-separated block-shape arms, e.g. prenorm,parallel,vskipinit,sas,"
                        "sas-p,sas-p+norm=none")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds: every arm runs once per seed; the table shows "
                        "the mean and spread (default: --seed)")
    p.add_argument("--depths", default=None,
                   help="comma-separated layer counts: every arm runs at each (--layers D); "
                        "one table section per depth")
    p.add_argument("--steps", type=int, required=True, help="training steps of every run")
    p.add_argument("--out", required=True, help="output directory (JSONL, logs, ablate.md/png)")
    p.add_argument("--seed", type=int, default=1337, help="seed shared by every run (1337)")
    p.add_argument("--reference", default=None,
                   help="arm the delta and speed columns compare with (default: baseline, "
                        "prenorm, or the first arm)")
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
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rebuild the table and plot from the runs OUT already holds "
                        "(the same arms, seeds, depths and steps as the run that made it; a run "
                        "whose metrics stop short of --steps, or that never started, is left "
                        "out and named)")
    p.add_argument("--keep-going", action="store_true",
                   help="when a run fails, finish the others and report it in the table "
                        "(exit status stays non-zero)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="train steps ignored when taking the median tok/s (default: min(5, steps/4))")
    p.add_argument("--match", choices=("params", "flops"), default=None,
                   help="add a matched control per arm: the reference arm widened to the arm's "
                        "parameters (params) or run longer to its training FLOPs (flops); the "
                        "table gains each arm's paired delta against its control "
                        "(launch/ablate_match.py says how)")
    p.add_argument("--expect", default=None,
                   help="published direction of arms against the reference, ARM=better|worse,... "
                        "(adds to or overrides launch/paired_stats.py PUBLISHED); the verdict "
                        "column compares the paired 95%% interval with it")
    args = p.parse_args(own)
    args.extra = extra
    def split(v):
        return [m.strip() for m in v.split(",") if m.strip()] if v is not None else None
    modes, blocks = split(args.modes), split(args.blocks)
    if modes is None and blocks is None:
        p.error("give --modes and/or --blocks")
    if modes is not None and not modes:
        p.error("--modes lists no mode")
    if blocks is not None and not blocks:
        p.error("--blocks lists no block shape")
    for what, arms in (("--modes", modes), ("--blocks", blocks)):
        if arms and len(set(arms)) != len(arms):
            p.error(f"{what} lists an arm twice: {arms}")
    args.arms = []  # (label, value-mode arm, block arm or None, matched Control or None)
    for m in modes or ["baseline"]:
        for b in blocks or [None]:
            label = m if blocks is None else (b if modes is None else f"{m}@{b}")
            args.arms.append((label, m, b, None))
    labels = [a[0] for a in args.arms]
    if args.reference is not None and args.reference not in labels:
        p.error(f"--reference {args.reference} is not one of the arms: {', '.join(labels)}")
    try:
        args.seeds = [int(x) for x in split(args.seeds)] if args.seeds else [args.seed]
        args.depths = [int(x) for x in split(args.depths)] if args.depths else [None]
    except ValueError as e:
        p.error(f"--seeds and --depths take comma-separated integers ({e})")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.depths)) != len(args.depths):
        p.error("--seeds / --depths list a value twice")
    if any(d is not None and d < 1 for d in args.depths):
        p.error("--depths must be >= 1")
    if args.match and len(args.depths) > 1:
        p.error("--match takes one depth (the matched width or steps depend on it); run one "
                "ablation per depth")
    if args.match and len(args.arms) < 2:
        p.error("--match needs an arm besides the reference")
    if args.depths != [None] and any(a.split("=", 1)[0] == "--layers" for a in extra):
        p.error("--layers after `--` conflicts with --depths")
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
    args.matched = {}  # --match: arm label -> its control's label (None: the reference matches)
    args.train_flags = {}
    args.expectations = {k: v[0] for k, v in paired_stats.PUBLISHED.items()}
    for item in split(args.expect) or []:
        arm, _, way = item.partition("=")
        if way not in ("better", "worse") or not arm:
            p.error(f"--expect takes ARM=better|worse items, got {item!r}")
        args.expectations[arm] = way
    return args


# ----------------------------------------------------------------------------- one run

def reference_label(labels: list[str], reference: str | None) -> str:
    """The arm the others are compared with: --reference, else baseline, prenorm or the first."""
    return reference or next((a for a in ("baseline", "prenorm") if a in labels), labels[0])


def model_args(arm: tuple, depth, extra: list[str]) -> list[str]:
    """The `vtrain train` flags that shape an arm's model (ablate.py's own flags left out)."""
    _, mode_arm, block_arm, _ = arm
    out = arm_flags(mode_arm, "--value")
    if block_arm is not None:
        out += arm_flags(block_arm, "--block")
    if depth is not None:
        out += ["--layers", str(depth)]
    return out + list(extra)


def add_controls(args) -> list[ablate_match.Control]:
    """--match: a control arm per arm that differs from the reference (ablate_match.py)."""
    meta = json.loads((Path(args.data) / "meta.json").read_text())
    vocab = int(meta["tokenizer"]["vocab_size"])
    facts = ablate_match.ModelFacts(args.vtrain, vocab)
    args.train_flags = facts.train_flags
    ref_label = reference_label([a[0] for a in args.arms], args.reference)
    ref = next(a for a in args.arms if a[0] == ref_label)
    depth = args.depths[0]
    ref_args = model_args(ref, depth, args.extra)
    controls, made = [], {}
    for arm in list(args.arms):
        if arm is ref:
            continue
        arm_args = model_args(arm, depth, args.extra)
        try:
            if args.match == "params":
                c = ablate_match.params_control(facts, ref_args, arm_args, arm[0], ref_label)
            else:
                c = ablate_match.flops_control(facts, ref_args, arm_args, arm[0], ref_label,
                                               args.steps)
        except ablate_match.MatchError as e:
            raise AblateError(f"--match {args.match}: {e}") from None
        if c.label is not None:  # arms with the same match share one control run
            key = (tuple(sorted(c.overrides.items())), c.steps)
            if key in made:
                c.label = made[key]
            else:
                made[key] = c.label
                args.arms.append((c.label, ref[1], ref[2], c))
        args.matched[arm[0]] = c.label
        controls.append(c)
    return controls


def arm_flags(arm: str, flag: str) -> list[str]:
    """`NAME+a=1+b` -> [flag, NAME, --a, 1, --b]."""
    name, *opts = arm.split("+")
    out = [flag, name]
    for o in opts:
        k, eq, v = o.partition("=")
        out += [f"--{k}"] + ([v] if eq else [])
    return out


class Run:
    """One `vtrain train` subprocess for one (arm, depth, seed), with its live progress."""

    def __init__(self, arm: tuple, depth, seed: int, args, out: Path):
        label, mode_arm, block_arm, control = arm
        self.arm, self.depth, self.seed = label, depth, seed
        name = (label.replace("@", "_at_").replace("+", "_").replace("=", "-")
                .replace("~", "_matched_").replace(":", "_"))
        steps = control.steps if control is not None and control.steps else args.steps
        extra = list(args.extra)
        if control is not None and control.overrides:
            extra = ablate_match.with_overrides(extra, control.overrides, args.train_flags)
        if depth is not None and len(args.depths) > 1:
            name += f"_L{depth}"
        if len(args.seeds) > 1:
            name += f"_s{seed}"
        self.mode = name  # the run's name (files, progress lines)
        self.metrics = out / f"{name}.jsonl"
        self.log = out / f"{name}.log"
        self.ckpt = None if args.no_ckpt else out / "ckpt" / name
        self.cmd = [args.vtrain, "train", "--data", args.data, *arm_flags(mode_arm, "--value")]
        if block_arm is not None:
            self.cmd += arm_flags(block_arm, "--block")
        if depth is not None:
            self.cmd += ["--layers", str(depth)]
        self.cmd += ["--steps", str(steps), "--seed", str(seed),
                     "--eval-every", str(args.eval_every), "--metrics", str(self.metrics)]
        if self.ckpt is not None:
            self.cmd += ["--ckpt-dir", str(self.ckpt)]
        self.cmd += extra
        self.env = dict(os.environ)
        if args.threads is not None:
            self.env.update(OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS="1")
        self.proc: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None
        self.lines: list[str] = []
        self.step = 0
        self.total = steps
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
        # vtrain never truncates a metrics file on a fresh run: this tool restarts its own runs,
        # so it removes the previous attempt's file itself.
        self.metrics.unlink(missing_ok=True)
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
    """(training steps, evaluations) of a run's metrics file (launch/run_metrics.py: a step a
    resumed run ran again counts once, a cut-off last line is left out); empty for a run that
    wrote nothing."""
    if not path.exists() or path.stat().st_size == 0:
        return [], []
    try:
        run = run_metrics.read_run(path)
    except run_metrics.MetricsError as e:
        raise AblateError(str(e)) from None
    return run.steps, run.evals


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
    row = {"mode": run.mode, "arm": run.arm, "depth": run.depth, "seed": run.seed,
           "ok": run.returncode == 0, "train": train, "evals": evals, "seconds": run.t1 - run.t0}
    row["params"] = count_params(args.vtrain, run.ckpt) if row["ok"] else None
    if row["params"] is None and run.params_m is not None:
        row["params"] = int(round(run.params_m * 1e6))
    last = evals[-1] if evals else {}
    # Every value through run_metrics.number: a hostile or null value is NaN, never a TypeError.
    row["val_loss"] = run_metrics.number(last.get("val_loss"))
    row["val_bpb"] = run_metrics.number(last.get("val_bpb"))
    row["eval_step"] = last.get("step")
    rates = [run_metrics.number(r.get("tok_per_s")) for r in train if r["step"] > args.warmup_steps]
    rates = [x for x in rates if not math.isnan(x)]
    if not rates:
        rates = [x for x in (run_metrics.number(r.get("tok_per_s")) for r in train)
                 if not math.isnan(x)]
    row["tok_s"] = float(np.median(rates)) if rates else float("nan")
    tokens = run_metrics.number(train[-1].get("tokens")) if train else 0
    row["tokens"] = int(tokens) if math.isfinite(tokens) else 0
    row["tokens_per_step"] = row["tokens"] / len(train) if train else 0
    row["final_loss"] = run_metrics.number(train[-1].get("loss")) if train else float("nan")
    return row


def fmt_params(n) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.3f}M" if n < 1e8 else f"{n / 1e9:.3f}B"


def fmt(x, spec=".4f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def mean_spread(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value) of the finite values."""
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def group(rows: list[dict]) -> list[dict]:
    """One entry per (depth, arm), in run order, aggregating the seeds."""
    out: dict = {}
    for r in rows:
        g = out.setdefault((r["depth"], r["arm"]), {"arm": r["arm"], "depth": r["depth"],
                                                    "runs": []})
        g["runs"].append(r)
    for g in out.values():
        ok = [r for r in g["runs"] if r["ok"] and not math.isnan(r["val_bpb"])]
        g["ok"] = len(ok) == len(g["runs"])
        g["params"] = next((r["params"] for r in g["runs"] if r["params"] is not None), None)
        g["val_loss"] = mean_spread([r["val_loss"] for r in ok])
        g["val_bpb"] = mean_spread([r["val_bpb"] for r in ok])
        g["tok_s"] = mean_spread([r["tok_s"] for r in ok])
        tps = [r["tokens_per_step"] for r in ok]
        g["ms_step"] = (1e3 * float(np.mean(tps)) / g["tok_s"][0]
                        if ok and g["tok_s"][0] > 0 else float("nan"))
        g["n"] = len(ok)
    return list(out.values())


def paired(g: dict, ref: dict | None, expectations: dict) -> dict | None:
    """The arm's per-seed paired bpb deltas against the reference's runs of the same seeds, their
    mean and 95% interval, and the verdict (launch/paired_stats.py); None for the reference."""
    if ref is None or g is ref:
        return None
    def by_seed(h):
        return {r["seed"]: r["val_bpb"] for r in h["runs"] if r["ok"]}
    deltas = paired_stats.paired_deltas(by_seed(g), by_seed(ref))
    mean, lo, hi, n = paired_stats.interval(deltas)
    return {"deltas": deltas, "mean": mean, "low": lo, "high": hi, "n": n,
            "verdict": paired_stats.verdict(lo, hi, expectations.get(g["arm"]),
                                            paired_stats.is_hybrid(g["arm"]))}


def multiple_comparisons_note(comparisons: int, seeds: int) -> str:
    """What the per-arm 95% intervals do not control: the number of comparisons, and the width of
    an interval from few seeds."""
    s = (f"each interval is a 95% interval for one arm, not adjusted for the {comparisons} "
         f"comparisons against the reference: with no true differences about "
         f"{0.05 * comparisons:.2f} of them would still exclude 0")
    if seeds <= 3:
        s += (f"; with {seeds} seeds the standard deviation behind each interval comes from "
              f"{seeds - 1} degree(s) of freedom, so the widths themselves are unreliable (two "
              "arms' widths can differ several-fold by chance): a verdict that hangs on a width "
              "needs more seeds")
    return s


def recipe_of(extra: list[str]) -> str:
    """The `--recipe` the runs trained under (from the extra `vtrain train` args)."""
    for i, a in enumerate(extra):
        if a == "--recipe" and i + 1 < len(extra):
            return f"`--recipe {extra[i + 1]}`"
        if a.startswith("--recipe="):
            return f"`--recipe {a.split('=', 1)[1]}`"
    return "vtrain's defaults (no `--recipe`; docs/model.md)"


def paired_cells(pr: dict | None) -> tuple[str, str]:
    """(paired delta [95% CI] (seeds), verdict) cells of a paired comparison."""
    ci = ("" if math.isnan(pr["low"])
          else f" [{fmt(pr['low'], '+.4f')}, {fmt(pr['high'], '+.4f')}]")
    return f"{fmt(pr['mean'], '+.4f')}{ci} ({pr['n']})", pr["verdict"]


def table(rows: list[dict], reference: str | None = None,
          expectations: dict | None = None, matched: dict | None = None) -> tuple[str, str]:
    """Markdown table (mean +- sample std over seeds), the paired delta of each arm against the
    reference with its 95% interval and verdict, and the reference arm (per depth). With
    `matched` (--match: arm -> its control's label, None where the reference matches it), two
    more columns: the paired delta against the matched control and its verdict."""
    expectations = expectations or {}
    matched = matched or {}
    groups = group(rows)
    arms = [g["arm"] for g in groups]
    ref_name = reference_label(arms, reference)
    seeds = max(len(g["runs"]) for g in groups)
    spread = seeds > 1
    pm = " +- std" if spread else ""
    head = (f"| run | depth | params | final val loss{pm} | final val bpb{pm} | "
            f"delta bpb vs {ref_name} | tok/s{pm} | ms/step | speed vs {ref_name} | "
            f"paired delta bpb [95% CI] (seeds) | verdict |")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    if matched:
        head += " paired delta bpb vs matched control [95% CI] (seeds) | verdict (matched) |"
        rule += "---:|---|"
    lines = [head, rule]
    extra_fail = " - | - |" if matched else ""
    for g in groups:
        depth = "-" if g["depth"] is None else str(g["depth"])
        if not g["ok"]:
            lines.append(f"| {g['arm']} | {depth} | {fmt_params(g['params'])} | failed | failed "
                         f"| - | - | - | - | - | - |{extra_fail}")
            continue
        ref = next((h for h in groups if h["arm"] == ref_name and h["depth"] == g["depth"]), None)
        def ms(v):
            return fmt(v[0]) + (f" +- {fmt(v[1])}" if spread else "")
        delta = (g["val_bpb"][0] - ref["val_bpb"][0]) if ref and ref["ok"] else None
        speed = (g["tok_s"][0] / ref["tok_s"][0]) if ref and ref["ok"] else None
        tok = fmt(g["tok_s"][0], ",.0f") + (f" +- {fmt(g['tok_s'][1], ',.0f')}" if spread else "")
        pr = paired(g, ref if ref and ref["ok"] else None, expectations)
        if pr is None:
            pcell, vcell = "-", "reference" if g["arm"] == ref_name else "-"
        else:
            pcell, vcell = paired_cells(pr)
        line = (f"| {g['arm']} | {depth} | {fmt_params(g['params'])} | {ms(g['val_loss'])} | "
                f"{ms(g['val_bpb'])} | {fmt(delta, '+.4f')} | {tok} | "
                f"{fmt(g['ms_step'], '.1f')} | {fmt(speed, '.3f')}x | {pcell} | {vcell} |")
        if matched:
            mcell, mv = "-", "-"
            if g["arm"] in matched:
                ctl_name = matched[g["arm"]]
                if ctl_name is None:  # the reference is its match (ablate_match.Control)
                    mcell, mv = (pcell + " (= reference)", vcell) if pr else ("-", "-")
                else:
                    ctl = next((h for h in groups if h["arm"] == ctl_name
                                and h["depth"] == g["depth"]), None)
                    if ctl is None or not ctl["ok"]:
                        mcell, mv = "control failed", "-"
                    else:
                        mcell, mv = paired_cells(paired(g, ctl, expectations))
            elif "~" in g["arm"]:
                mcell, mv = "(a control)", "-"
            line += f" {mcell} | {mv} |"
        lines.append(line)
    return "\n".join(lines), ref_name


def plot(rows: list[dict], path: Path, title: str, ref_name: str | None = None,
         expectations: dict | None = None):
    """Validation bpb against step per arm (mean over seeds, shaded min-max band), one panel per
    depth, the training loss (moving average, mean over seeds), and each arm's paired delta
    against the reference with its 95% interval as an error bar."""
    plt = run_metrics.pyplot()
    groups = group(rows)
    depths = list(dict.fromkeys(g["depth"] for g in groups))
    fig, axes = plt.subplots(len(depths), 3, figsize=(18, 4.5 * len(depths)), squeeze=False)
    for d, (ax1, ax2, ax3) in zip(depths, axes):
        ref = next((g for g in groups if g["arm"] == ref_name and g["depth"] == d), None)
        ys, labels = [], []
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        at_depth = [g for g in groups if g["depth"] == d]
        for i, g in enumerate(at_depth):  # the colours of the other panels' lines
            if g is ref:
                continue
            pr = paired(g, ref, expectations or {}) if ref and ref["ok"] else None
            if pr is None or pr["n"] == 0:
                continue
            y = len(ys)
            err = None if math.isnan(pr["low"]) else [[pr["mean"] - pr["low"]],
                                                      [pr["high"] - pr["mean"]]]
            ax3.errorbar([pr["mean"]], [y], xerr=err, fmt="o", capsize=4,
                         color=colors[i % len(colors)])
            ax3.plot(pr["deltas"], [y] * len(pr["deltas"]), "x", color="grey", markersize=4)
            ys.append(y)
            labels.append(f"{g['arm']}: {pr['verdict']}")
        ax3.axvline(0, color="black", lw=0.8)
        ax3.set_yticks(ys, labels, fontsize=7)
        ax3.invert_yaxis()
        ax3.set(xlabel=f"val bpb - {ref_name} (same seed; negative = better)",
                title="paired delta, mean and 95% interval (x: seeds)")
        ax3.grid(alpha=0.3)
        for g in (g for g in groups if g["depth"] == d):
            runs = [r for r in g["runs"] if r["evals"]]
            if runs:
                n = min(len(r["evals"]) for r in runs)
                steps = [e["step"] for e in runs[0]["evals"][:n]]
                bpb = np.array([[run_metrics.number(e.get("val_bpb")) for e in r["evals"][:n]]
                                for r in runs])
                line, = ax1.plot(steps, bpb.mean(0), marker="o", markersize=3, label=g["arm"])
                if len(runs) > 1:
                    ax1.fill_between(steps, bpb.min(0), bpb.max(0), alpha=0.2,
                                     color=line.get_color())
            runs = [r for r in g["runs"] if r["train"]]
            if runs:
                n = min(len(r["train"]) for r in runs)
                steps = np.array([t["step"] for t in runs[0]["train"][:n]])
                loss = np.array([[run_metrics.number(t.get("loss")) for t in r["train"][:n]]
                                 for r in runs]).mean(0)
                k = max(1, len(loss) // 50)  # light smoothing: moving average over ~2% of the run
                ax2.plot(steps[k - 1:], run_metrics.moving_average(loss, k), label=g["arm"])
        where = "" if d is None else f" ({d} layers)"
        ax1.set(xlabel="step", ylabel="validation bits per byte",
                title=f"val bpb{where} (lower is better)")
        ax2.set(xlabel="step", ylabel="train loss (nats)", title=f"train loss{where} (moving average)")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- driver

def adopt_finished(runs: list[Run], args) -> list[Run]:
    """--report-only: a run whose metrics file reached --steps with an evaluation after its last
    step counts as finished (exit status 0, its parameter count from its log); the others are
    left out of the table and named. Returns no failures: nothing ran."""
    missing = []
    for r in runs:
        train, evals = read_metrics(r.metrics)
        if train and train[-1]["step"] >= args.steps and evals and evals[-1].get("step") == train[-1]["step"]:
            r.returncode = 0
            if r.log.exists():
                for line in r.log.read_text(errors="replace").splitlines():
                    if m := PARAMS_RE.search(line):
                        r.params_m = float(m.group(1))
                        break
        else:
            missing.append(r.mode)
    print(f"ablate: --report-only: {len(runs) - len(missing)} of {len(runs)} runs finished"
          + (f"; left out (unfinished or never started): {', '.join(missing)}" if missing else ""),
          flush=True)
    return []

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
    if out.exists() and not out.is_dir():
        raise AblateError(f"--out {out} exists and is not a directory; ablate.py writes a "
                          f"directory of runs (choose another --out)")
    if args.report_only and not out.is_dir():
        raise AblateError(f"--out {out}: no such directory; --report-only rebuilds the table of "
                          f"an ablation that ran into --out (run it without --report-only first)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AblateError(f"--out {out}: cannot create it ({e.strerror})") from None
    # Seed-major order: the arms alternate (a, b, c, a, b, c, ...), so that a change of the
    # machine's load during the ablation spreads over every arm instead of favouring some.
    controls = add_controls(args) if args.match else []
    for c in controls:
        print(f"ablate: --match {args.match}: {c.arm}: "
              + (f"control {c.label} = " if c.label else "no control run: ") + c.why, flush=True)
    runs = [Run(a, d, seed, args, out) for d in args.depths for seed in args.seeds for a in args.arms]
    print(f"ablate: {len(args.arms)} arms x {len(args.depths)} depth(s) x {len(args.seeds)} "
          f"seed(s) = {len(runs)} runs of {args.steps} steps, seeds {args.seeds}, data {args.data}, "
          f"eval every {args.eval_every}, jobs {args.jobs}"
          + (f", {args.threads} thread(s) per run" if args.threads else "")
          + (f"\n  extra: {shlex.join(args.extra)}" if args.extra else ""), flush=True)
    t0 = time.time()
    if args.report_only:
        failed = adopt_finished(runs, args)
    else:
        try:
            failed = run_all(runs, args)
        except KeyboardInterrupt:
            for r in runs:
                r.kill()
            raise
    if failed and not args.keep_going:
        raise AblateError(f"stopped: run '{failed[0].mode}' failed (see above); no table written")
    if all(r.returncode is None for r in runs):
        raise AblateError(f"no run of this ablation finished in --out {out} (none reached "
                          f"--steps {args.steps} with a final evaluation): nothing to tabulate")
    (out / "runs.json").write_text(json.dumps(
        [{"run": r.mode, "arm": r.arm, "depth": r.depth, "seed": r.seed, "cmd": r.cmd,
          "returncode": r.returncode} for r in runs], indent=1))

    rows = [summarize(r, args) for r in runs if r.returncode is not None]
    md, ref = table(rows, args.reference, args.expectations, args.matched)
    tokens = max((r["tokens"] for r in rows), default=0)
    budget = (f"{args.steps} steps, {tokens:,} training tokens per run, "
              f"seed{'s' if len(args.seeds) > 1 else ''} {','.join(map(str, args.seeds))}, "
              f"data `{args.data}`")
    print("\n" + md + "\n")
    print(f"({budget}; tok/s = median over steps > {args.warmup_steps}; "
          f"total {time.time() - t0:.0f}s)")
    cmdline = shlex.join([sys.executable, "launch/ablate.py", *argv])
    doc = [
        "# Ablation", "",
        f"- budget: {budget}",
        f"- extra `vtrain train` args: `{shlex.join(args.extra) or '(none)'}`",
        f"- evaluation every {args.eval_every} steps; final values are the last evaluation "
        "(after the last step)",
        f"- delta bpb is relative to `{ref}` at the same depth (negative = better); with several "
        "seeds the values are the mean and the sample standard deviation over seeds",
        f"- speed vs `{ref}`: mean tok/s of the arm over the reference's (> 1 = faster)",
        f"- paired delta: the arm's bpb minus `{ref}`'s for the same seed, mean and 95% "
        "interval (Student's t, n-1 degrees of freedom) over the seeds both finished; verdict "
        "from the interval against the published direction (reproduced: the whole interval on "
        "the published side of 0; not reproduced: on the other side; not resolved: it contains "
        "0), never from the mean alone (launch/paired_stats.py)",
        f"- {multiple_comparisons_note(len(args.arms) - 1, len(args.seeds))}",
        f"- recipe: {recipe_of(args.extra)}",
        "- published directions used: " + "; ".join(
            f"`{a}` {w}" + (f" ({paired_stats.PUBLISHED[a][1]})" if a in paired_stats.PUBLISHED
                            and paired_stats.PUBLISHED[a][0] == w else " (--expect)")
            for a, w in args.expectations.items() if any(x[0] == a for x in args.arms)),
        *([ "- arms without a published direction: " + "; ".join(
            f"`{a[0]}`: {paired_stats.note(a[0])}" for a in args.arms
            if paired_stats.note(a[0]) and a[0] not in args.expectations)]
          if any(paired_stats.note(a[0]) and a[0] not in args.expectations for a in args.arms)
          else []),
        f"- tok/s: median of per-step training throughput after {args.warmup_steps} warm-up "
        f"steps; runs were {'sequential' if args.jobs == 1 else f'{args.jobs} at a time'}"
        + (f", {args.threads} thread(s) each" if args.threads else ""),
        *([f"- matched controls (--match {args.match}, launch/ablate_match.py): "
            + "; ".join(f"`{c.arm}`: " + (f"`{c.label}` = " if c.label else "") + c.why
                        for c in controls)]
          if args.match else []),
        f"- command: `{cmdline}`", "", md, "",
        "![val bpb vs step](ablate.png)", ""]
    (out / "ablate.md").write_text("\n".join(doc))
    plot(rows, out / "ablate.png", f"{budget}  |  {shlex.join(args.extra)}", ref,
         args.expectations)
    print(f"wrote {out / 'ablate.md'}, {out / 'ablate.png'} and {len(rows)} metrics files")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AblateError as e:
        print(f"ablate.py: error: {e}", file=sys.stderr)
        sys.exit(1)
