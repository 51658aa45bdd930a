# launch/run_metrics.py owns reading the metrics files of `vtrain train --metrics FILE`
# (docs/design.md "Metrics JSONL") for the Python tools that draw or forward them
# (launch/plot_run.py, launch/wandb_follow.py, launch/ablate.py): parsing a line (a crash
# mid-write, and a resumed run appending to the cut line), skipping lines that are not records
# with a count (the one policy of every tool: docs/usage.md "Plotting runs"), sorting records by
# kind, keeping the last occurrence of a step that a resumed run ran again, and the few helpers
# the plots share.
# Standard library + numpy only (matplotlib is imported by pyplot() when a caller draws).
"""Read vtrain metrics JSONL files.

    run = read_run(Path("runs/x/metrics.jsonl"), name="x")
    run.steps      # training-step records, one per step (the last occurrence), by step
    run.evals      # evaluations (val_loss, val_bpb, val_tokens), one per step
    run.cores      # CORE evaluations; run.skipped: skipped non-finite steps; run.ckpts
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class MetricsError(Exception):
    """A metrics file that cannot be read; the message names the file (and line)."""


def loads(text: str):
    """json.loads that raises ValueError for everything a hostile line can do to the parser: bad
    JSON, nesting deeper than the interpreter's recursion limit (RecursionError otherwise),
    integers longer than Python converts."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


class Skipped:
    """Lines that are not vtrain metrics records, skipped: how many, and the first by name."""

    def __init__(self):
        self.count = 0
        self.first = None

    def add(self, error: Exception):
        self.count += 1
        if self.first is None:
            self.first = str(error)

    def note(self, path) -> str | None:
        if not self.count:
            return None
        return (f"{path}: skipped {self.count} line{'s' if self.count > 1 else ''} that "
                f"{'are' if self.count > 1 else 'is'} not a vtrain metrics record (first: "
                f"{self.first})")


KINDS = ("step", "skipped", "eval", "core", "ckpt", "other")


def kind_of(rec: dict) -> str:
    """The record's kind (docs/design.md "Metrics JSONL")."""
    if rec.get("skipped") is True:
        return "skipped"
    if "val_bpb" in rec or "val_loss" in rec:
        return "eval"
    if "core" in rec:
        return "core"
    if "ckpt_pause_s" in rec:
        return "ckpt"
    if "loss" in rec:
        return "step"
    return "other"


def parse_line(line: str, where: str) -> tuple[dict, str | None]:
    """One complete line -> (record, note). A line whose start is a record cut short by a crash
    and whose rest is the first line a resumed run appended gives the appended record and a note.
    Anything else that is not a JSON object with an integer "step" (0 <= step < 2^62) raises
    MetricsError."""
    note = None
    try:
        rec = loads(line)
    except ValueError as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        rec = None
        i = line.find("{", 1)
        tries = 0
        while i > 0 and tries < 256:  # the tail after a cut-off record: a whole record of its own?
            tries += 1
            try:
                rec = loads(line[i:])
                note = (f"{where}: begins with a record cut off mid-write (a crash) and the next "
                        f"run's first record appended to it: kept that record, dropped "
                        f"{line[:i][:60]!r}")
                break
            except ValueError:
                i = line.find("{", i + 1)
        if rec is None:
            raise MetricsError(f"{where}: not a JSON line ({why}): {line[:80]!r}") from None
    if not isinstance(rec, dict) or isinstance(rec.get("step"), bool) \
            or not isinstance(rec.get("step"), int) or not 0 <= rec["step"] < 2 ** 62:
        raise MetricsError(f"{where}: not a vtrain metrics record (a JSON object with an integer "
                           f"\"step\"): {line[:80]!r}")
    return rec, note


def split_lines(text: str, where: str, final: bool = True, first: int = 1,
                skipped: Skipped | None = None):
    """Parses the text of a metrics file (or the part of one read so far). Returns (records,
    notes, rest): `rest` is the unfinished last line (no newline yet). A complete line that is
    not a record is skipped and counted in `skipped` (a note says how many when no `skipped` is
    given). With `final` (the whole file, nothing more will come), an unfinished last line that
    parses is a record, and one that does not is dropped with a note (a crash mid-write); `rest`
    is then empty. `first`: the line number of the text's first line (for the messages)."""
    records, notes = [], []
    own = skipped is None
    skipped = Skipped() if own else skipped
    lines = text.split("\n")
    rest = lines.pop()  # "" when the text ends with a newline
    for n, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            rec, note = parse_line(line, f"{where}:{n}")
        except MetricsError as e:
            skipped.add(e)
            continue
        records.append(rec)
        if note:
            notes.append(note)
    if final and rest.strip():
        n = len(lines) + first
        try:
            rec, note = parse_line(rest, f"{where}:{n}")
            records.append(rec)
            if note:
                notes.append(note)
        except MetricsError:
            notes.append(f"{where}:{n}: the last line is incomplete (the run was cut off while "
                         f"writing it): ignored ({rest[:60]!r})")
        rest = ""
    if own and skipped.count:
        notes.append(skipped.note(where))
    return records, notes, rest


def dedup(records: list[dict]) -> tuple[list[dict], int, int]:
    """Keeps the last occurrence of each (kind, step) (a step and a skipped step share a key;
    a record of an unknown kind is told apart by its field names too):
    a run resumed from an earlier checkpoint runs and logs some steps again, and its own records
    are the run's. Returns (records sorted by step, stably; lines superseded; restarts: how often
    the step number of a training step went back or repeated)."""
    last: dict = {}
    prev, restarts = None, 0
    for i, r in enumerate(records):
        k = kind_of(r)
        if k in ("step", "skipped"):
            key = ("step", r["step"])
        elif k == "other":  # records of kinds this reader does not know: by their fields
            key = (k, r["step"], tuple(sorted(r)))
        else:
            key = (k, r["step"])
        last[key] = i
        if k in ("step", "skipped"):
            if prev is not None and r["step"] <= prev:
                restarts += 1
            prev = r["step"]
    keep = sorted(last.values(), key=lambda i: (records[i]["step"], i))
    return [records[i] for i in keep], len(records) - len(keep), restarts


def number(v) -> float:
    """A metric value as a float: NaN for absent, null (vtrain writes non-finite numbers as
    null) or non-numeric values."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return float("nan")
    try:
        return float(v)
    except OverflowError:  # an integer beyond float's range
        return float("nan")


@dataclass
class Run:
    name: str
    path: Path
    steps: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    cores: list = field(default_factory=list)
    ckpts: list = field(default_factory=list)
    other: list = field(default_factory=list)
    superseded: int = 0
    restarts: int = 0
    notes: list = field(default_factory=list)

    @classmethod
    def from_records(cls, name: str, path: Path, records: list[dict], notes=()) -> "Run":
        recs, superseded, restarts = dedup(records)
        run = cls(name, path, superseded=superseded, restarts=restarts, notes=list(notes))
        lists = {"step": run.steps, "skipped": run.skipped, "eval": run.evals,
                 "core": run.cores, "ckpt": run.ckpts, "other": run.other}
        for r in recs:
            lists[kind_of(r)].append(r)
        return run

    def values(self, key: str, records: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of `key` over `records` (default: the training steps), leaving out
        the records that lack it or hold null."""
        recs = self.steps if records is None else records
        pts = [(r["step"], number(r.get(key))) for r in recs]
        pts = [(s, v) for s, v in pts if not math.isnan(v)]
        return (np.array([p[0] for p in pts], dtype=np.int64),
                np.array([p[1] for p in pts], dtype=np.float64))

    def tokens_at(self, steps) -> np.ndarray:
        """Tokens seen after each of `steps` (an evaluation's step, say): from the training
        steps' `tokens`, interpolated between them and extrapolated at their last rate; NaN
        when the run has no training step with tokens."""
        s, t = self.values("tokens")
        steps = np.asarray(steps, dtype=np.float64)
        if len(s) == 0:
            return np.full(steps.shape, np.nan)
        s = np.concatenate([[0], s]).astype(np.float64)
        t = np.concatenate([[0], t])
        out = np.interp(steps, s, t)
        rate = t[-1] / s[-1] if s[-1] > 0 else 0.0
        beyond = steps > s[-1]
        out[beyond] = t[-1] + (steps[beyond] - s[-1]) * rate
        return out


def find_metrics_file(arg: str) -> Path:
    """A RUN argument -> its metrics file: the file itself, or a directory's metrics.jsonl (or
    its only *.jsonl file)."""
    p = Path(arg)
    if p.is_dir():
        if (p / "metrics.jsonl").is_file():
            return p / "metrics.jsonl"
        found = sorted(q for q in p.glob("*.jsonl") if q.is_file())
        if len(found) == 1:
            return found[0]
        if not found:
            raise MetricsError(f"{p}: a directory with no metrics file (metrics.jsonl or one "
                               f"*.jsonl); pass the file written by `vtrain train --metrics FILE`")
        raise MetricsError(f"{p}: a directory with several .jsonl files and no metrics.jsonl "
                           f"({', '.join(q.name for q in found)}); name the file")
    if not p.exists():
        raise MetricsError(f"{p}: no such file (a RUN is a metrics file of `vtrain train "
                           f"--metrics FILE` or a directory holding one)")
    if not p.is_file():
        raise MetricsError(f"{p}: not a regular file")
    return p


def parse_run_arg(arg: str) -> tuple[str | None, str]:
    """'name=path' -> (name, path); a bare path -> (None, path). A path that exists as given
    (even with '=' in it) is a bare path."""
    if "=" in arg and not Path(arg).exists():
        name, path = arg.split("=", 1)
        if name and path:
            return name, path
    return None, arg


def default_name(arg: str, file: Path) -> str:
    """A directory's name; a file's stem, or its directory's name when the stem says nothing."""
    p = Path(arg)
    if p.is_dir():
        return p.resolve().name
    if file.stem in ("metrics", "train", "log") and file.resolve().parent.name:
        return file.resolve().parent.name
    return file.stem


def read_run(path: Path, name: str | None = None) -> Run:
    """Reads a whole metrics file (MetricsError naming it when it is missing, empty or holds no
    vtrain metrics record; lines that are not records are skipped with a note counting them)."""
    path = Path(path)
    if not path.exists():
        raise MetricsError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise MetricsError(f"{path}: {e.strerror}") from None
    if not text.strip():
        raise MetricsError(f"{path}: empty (no metrics lines yet: has the run taken a step?)")
    skipped = Skipped()
    records, notes, _ = split_lines(text, str(path), final=True, skipped=skipped)
    if not records:
        raise MetricsError(f"{path}: holds no complete metrics line"
                           + (f" ({skipped.note(path)})" if skipped.count else ""))
    if skipped.count:
        notes.append(skipped.note(path))
    return Run.from_records(name or path.stem, path, records, notes)


def load_runs(args: list[str]) -> list[Run]:
    """RUN arguments ('[name=]file-or-directory') -> runs with unique names."""
    runs, seen = [], {}
    for arg in args:
        name, where = parse_run_arg(arg)
        file = find_metrics_file(where)
        name = name or default_name(where, file)
        if name in seen:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 1
        runs.append(read_run(file, name))
    return runs


def ema(values: np.ndarray, beta: float) -> np.ndarray:
    """Bias-corrected exponential moving average (beta 0: the values themselves)."""
    if beta <= 0 or len(values) == 0:
        return np.asarray(values, dtype=np.float64)
    out, m = np.empty(len(values)), 0.0
    for i, v in enumerate(values):
        m = beta * m + (1 - beta) * v
        out[i] = m / (1 - beta ** (i + 1))
    return out


def moving_average(values, k: int) -> np.ndarray:
    """Mean over windows of k values (len(values) - k + 1 of them)."""
    return np.convolve(np.asarray(values, dtype=np.float64), np.ones(k) / k, mode="valid")


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
