#!/usr/bin/env python3
# launch/wandb_follow.py owns mirroring a vtrain metrics file into a Weights & Biases run
# (docs/usage.md "Following a run in Weights & Biases"): it follows the file as the run writes
# it (like tail -f), logs every record at its step, and finishes the wandb run when the run's
# final record has come (known from the run's options), when the file has been idle for --idle
# seconds, or at once with --once. vtrain itself never talks to the network; this script does
# only when wandb is online (WANDB_MODE=offline keeps everything on disk for `wandb sync`).
# Reading the file is launch/run_metrics.py's.
"""Follow a vtrain metrics file into a Weights & Biases run.

    python launch/wandb_follow.py runs/x/metrics.jsonl --project vtrain --name x \\
        --config runs/x/ckpt [--once | --idle 600]

--config takes a JSON file (an object: logged as the run's config), a vtrain checkpoint
(.h5: its options and model config) or a checkpoint directory (its `latest`). With the options'
`steps` (or --steps) the follower knows the run's last record and stops there; without, it stops
after --idle seconds with nothing new. Records are logged under their own names (loss, lr,
tokens, tok_per_s, mfu, grad_norm, ..., val_loss, val_bpb, core, core_centered/TASK, ckpt_pause_s;
a skipped step as skipped=1), at step = the record's step. A resumed run that runs steps again
cannot rewrite wandb's history: the records present when the follower starts are taken as the
file's final word (the last occurrence of each step), and a later record for a step already
logged is left out (counted on stderr).
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_metrics  # noqa: E402  (launch/run_metrics.py)
from run_metrics import MetricsError  # noqa: E402

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
DEFAULT_EVAL_TOKENS = 65536  # vtrain train --eval-tokens (the final evaluation's default)


class FollowError(Exception):
    """A failure the user has to act on; printed without a traceback."""


# ----------------------------------------------------------------------------- config

def read_checkpoint_config(path: Path) -> dict:
    """A vtrain checkpoint's options (root attribute `extra`), its model config (`model`) and
    its step, for the wandb config."""
    try:
        import h5py
    except ImportError:
        raise FollowError(f"--config {path}: reading a checkpoint needs h5py "
                          f"(scripts/requirements.txt)") from None
    try:
        with h5py.File(path, "r") as f:
            attrs = dict(f.attrs)
    except OSError as e:
        raise FollowError(f"--config {path}: not a readable HDF5 checkpoint ({e})") from None

    def text(v):
        return v.decode() if isinstance(v, bytes) else str(v)

    if text(attrs.get("format", b"")) != "vtrain-checkpoint":
        raise FollowError(f"--config {path}: an HDF5 file but not a vtrain checkpoint")
    try:
        extra = json.loads(text(attrs.get("extra", b"{}")))
        model = json.loads(text(attrs.get("config", b"{}")))
    except json.JSONDecodeError as e:
        raise FollowError(f"--config {path}: its options are not JSON ({e})") from None
    cfg = dict(extra) if isinstance(extra, dict) else {}
    cfg.pop("pending_eval_tokens", None)  # the checkpoint's state, not the run's option
    cfg["model"] = model
    cfg["checkpoint_step"] = int(attrs["step"]) if "step" in attrs else None
    return cfg


def read_config(arg: str) -> dict:
    """--config: a JSON object file, a vtrain checkpoint, or a checkpoint directory."""
    p = Path(arg)
    if p.is_dir():
        latest = p / "latest"
        if not latest.is_file():
            raise FollowError(f"--config {p}: a directory without a `latest` checkpoint pointer "
                              f"(give a checkpoint file or a JSON file)")
        p = p / latest.read_text().strip()
    if not p.is_file():
        raise FollowError(f"--config {p}: no such file")
    with open(p, "rb") as f:
        head = f.read(8)
    if head == HDF5_MAGIC:
        return read_checkpoint_config(p)
    try:
        cfg = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FollowError(f"--config {p}: neither JSON nor a vtrain checkpoint ({e})") from None
    if not isinstance(cfg, dict):
        raise FollowError(f"--config {p}: the JSON is not an object")
    return cfg


def final_record(cfg: dict, steps: int | None) -> tuple[str, int] | None:
    """The run's last record, (kind, step), from its options (docs/design.md "Metrics JSONL":
    after the last step come the final checkpoint, the final evaluation unless
    --final-eval-tokens 0, and CORE with --core-every); None when the step count is unknown."""
    total = steps if steps is not None else cfg.get("steps")
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        return None
    if isinstance(cfg.get("core_every"), int) and cfg["core_every"] > 0:
        return "core", total
    final_eval = cfg.get("final_eval_tokens", cfg.get("eval_tokens", DEFAULT_EVAL_TOKENS))
    if isinstance(final_eval, (int, float)) and final_eval > 0:
        return "eval", total
    return "step", total


# ----------------------------------------------------------------------------- records

def to_wandb(rec: dict) -> dict:
    """A metrics record -> the values to log (step left out; nested objects as a/b keys; null,
    non-finite numbers and non-numbers left out; a skipped step as skipped=1 with its
    grad norm, when finite, as skipped_grad_norm: its non-finite loss never enters the curve)."""
    kind = run_metrics.kind_of(rec)
    out: dict = {}

    def put(key, v):
        if isinstance(v, bool):
            out[key] = int(v)
        elif isinstance(v, (int, float)) and math.isfinite(v):
            out[key] = v
        elif isinstance(v, dict):
            for k, w in v.items():
                put(f"{key}/{k}", w)

    if kind == "skipped":
        out["skipped"] = 1
        put("skipped_grad_norm", rec.get("grad_norm"))
        return out
    for k, v in rec.items():
        if k != "step":
            put(k, v)
    return out


class Follower:
    """Reads a metrics file as it grows and logs its records to a wandb run."""

    def __init__(self, path: Path, run, final: tuple[str, int] | None, log=print):
        self.path, self.run, self.final, self.log = path, run, final, log
        self.offset, self.line_no, self.rest = 0, 1, b""
        self.last_step = -1
        self.logged = 0        # records logged
        self.left_out = 0      # records of steps already logged (a resumed run ran them again)
        self.done = False      # the run's final record has come
        self.skipped = run_metrics.Skipped()  # lines that are not records

    def read_new(self, final: bool = False) -> list[dict]:
        """The complete records appended since the last call (`final`: the unfinished last line
        too, as the run will write no more)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # vtrain never truncates; someone replaced the file
            self.log(f"note: {self.path} shrank ({size} < {self.offset} bytes): reading it "
                     f"again from the start")
            self.offset, self.line_no, self.rest = 0, 1, b""
        if size == self.offset and not (final and self.rest):
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")  # bytes: a read may end inside a character
        self.rest = lines.pop()  # the line being written (b"" after a newline)
        first, self.line_no = self.line_no, self.line_no + len(lines)
        records, notes = [], []
        bad = run_metrics.Skipped()
        for n, raw in enumerate(lines, first):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                rec, note = run_metrics.parse_line(line, f"{self.path}:{n}")
            except MetricsError as e:  # counted, and the lines after it still read
                bad.add(e)
                self.skipped.add(e)
                continue
            records.append(rec)
            if note:
                notes.append(note)
        if final and self.rest.strip():
            recs, ns, _ = run_metrics.split_lines(self.rest.decode("utf-8", errors="replace"),
                                                  str(self.path), True, self.line_no)
            records += recs
            notes += ns
            self.rest = b""
        if bad.count:
            self.log(f"warning: {bad.note(self.path)}")
        for n in notes:
            self.log(f"note: {n}")
        return records

    def log_records(self, records: list[dict]):
        for rec in records:
            step = rec["step"]
            kind = run_metrics.kind_of(rec)
            if step < self.last_step:
                self.left_out += 1
                continue
            values = to_wandb(rec)
            if values:
                self.run.log(values, step=step)
                self.logged += 1
            self.last_step = step
            if self.final and (kind, step) == self.final:
                self.done = True

    def backlog(self) -> list[dict]:
        """What the file holds now: the last occurrence of each step, in step order."""
        recs, _, _ = run_metrics.dedup(self.read_new())
        return recs


def wait_for_file(path: Path, idle: float, poll: float, stopping) -> bool:
    t0 = time.monotonic()
    while not path.exists():
        if stopping() or time.monotonic() - t0 > idle:
            return False
        time.sleep(poll)
    return True


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Follow a vtrain metrics file (as it grows) into a Weights & Biases run.",
        usage="%(prog)s METRICS --project P [--name N] [--config FILE] [--once | --idle S]")
    p.add_argument("metrics", metavar="METRICS",
                   help="metrics file of `vtrain train --metrics FILE` (or a directory holding "
                        "metrics.jsonl)")
    p.add_argument("--project", required=True, help="wandb project")
    p.add_argument("--name", default=None, help="wandb run name (default: wandb's)")
    p.add_argument("--entity", default=None, help="wandb entity (team or user)")
    p.add_argument("--group", default=None, help="wandb group")
    p.add_argument("--tags", default=None, help="comma-separated wandb tags")
    p.add_argument("--config", default=None,
                   help="the run's config: a JSON file, a vtrain checkpoint (.h5) or a "
                        "checkpoint directory (its latest); its `steps` tells the final record")
    p.add_argument("--steps", type=int, default=None,
                   help="the run's --steps (overrides the config's): the follower stops after "
                        "the run's final record")
    p.add_argument("--once", action="store_true",
                   help="log what the file holds now and finish (no following)")
    p.add_argument("--idle", type=float, default=600.0,
                   help="stop after this many seconds without a new line (default 600)")
    p.add_argument("--poll", type=float, default=1.0,
                   help="seconds between looks at the file (default 1)")
    p.add_argument("--mode", choices=("online", "offline"), default=None,
                   help="wandb mode (default: WANDB_MODE, else wandb's own default)")
    a = p.parse_args(argv)
    if a.idle <= 0 or a.poll <= 0:
        p.error("--idle and --poll must be positive")
    if a.steps is not None and a.steps <= 0:
        p.error(f"--steps {a.steps}: must be positive")
    return a


def resolve_metrics(arg: str, must_exist: bool) -> Path:
    p = Path(arg)
    if p.is_dir():
        return run_metrics.find_metrics_file(arg) if must_exist or any(p.glob("*.jsonl")) \
            else p / "metrics.jsonl"
    if p.exists() and not p.is_file():
        raise FollowError(f"{p}: not a regular file")
    if must_exist and not p.exists():
        raise FollowError(f"{p}: no such file (the metrics file of `vtrain train --metrics "
                          f"FILE`)")
    return p


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    try:
        path = resolve_metrics(args.metrics, must_exist=args.once)
        if args.once and path.stat().st_size == 0:
            raise FollowError(f"{path}: empty (no metrics lines yet)")
        cfg = read_config(args.config) if args.config else {}
        final = final_record(cfg, args.steps)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        if not args.once and not wait_for_file(path, args.idle, args.poll,
                                               lambda: stop["signal"] is not None):
            raise FollowError(f"{path}: no such file after waiting {args.idle:g} s (--idle)")
    except (FollowError, MetricsError) as e:
        say(f"wandb_follow.py: error: {e}")
        return 2

    f = Follower(path, None, final, log=say)
    backlog = f.backlog()
    if not backlog and f.skipped.count:  # lines, none of them a record: not a metrics file
        say(f"wandb_follow.py: error: {path}: holds no vtrain metrics record "
            f"({f.skipped.note(path)})")
        return 2

    import wandb  # after the checks: a mistyped path fails fast

    cfg = dict(cfg, metrics_file=str(path.resolve()))
    settings = wandb.Settings(console="off", x_disable_stats=True, disable_git=True,
                              save_code=False, x_save_requirements=False)
    run = wandb.init(project=args.project, name=args.name, entity=args.entity, group=args.group,
                     tags=args.tags.split(",") if args.tags else None, config=cfg,
                     mode=args.mode, settings=settings)
    f.run = run
    exit_code = 0
    try:
        f.log_records(backlog)
        if not args.once and not f.done:
            # Says that the file's present records are logged and what ends the following (also
            # the moment a test may append, knowing the follower has read what came before).
            until = (f"the run's final record ({final[0]} of step {final[1]})" if final
                     else f"{args.idle:g} s with nothing new (--idle)")
            say(f"following {path}: {f.logged} records logged up to step {f.last_step}; "
                f"waiting for more until {until}")
        last_new = time.monotonic()
        while not args.once and not f.done and stop["signal"] is None:
            time.sleep(args.poll)
            recs = f.read_new()
            if recs:
                f.log_records(recs)
                last_new = time.monotonic()
            elif time.monotonic() - last_new > args.idle:
                say(f"{path}: nothing new for {args.idle:g} s (--idle): finishing")
                break
        f.log_records(f.read_new(final=True))  # a last look (and a cut-off last line)
        if stop["signal"] is not None:
            say(f"stopped by signal {stop['signal']}")
    except Exception:
        exit_code = 1
        raise
    finally:
        run.finish(exit_code=exit_code)
        why = "the run's final record" if f.done else ("--once" if args.once else "no final record")
        say(f"logged {f.logged} records of {path} up to step {f.last_step} ({why})"
            + (f"; left out {f.left_out} records of steps already logged (a resumed run ran "
               f"them again)" if f.left_out else "")
            + (f"; skipped {f.skipped.count} lines that are not vtrain metrics records"
               if f.skipped.count else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
