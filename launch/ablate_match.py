# launch/ablate_match.py owns the matched controls of the ablation runner (launch/ablate.py
# --match params|flops): for each arm that differs from the reference arm in parameters or in
# FLOPs per token, a control run of the reference arm made equal to it, and the arithmetic that
# chooses it. The model's facts come from `vtrain plan --model-only --json` (the same parameter
# and FLOP counts `vtrain train` and the planner use), never from a formula of our own here.
"""Matched controls: "is the arm better, or just bigger?"

--match params: the reference arm widened (or narrowed) to the arm's parameter count. The width
  dim = heads x head_dim moves by the head size in steps of 2 (half to twice the reference's,
  same heads), or by whole heads (up to four times the reference's, same head size, the
  key/value heads keeping the group size); the count nearest the arm's wins (ties: the first
  candidate, the narrower head size). The depth and everything else stay.
--match flops: the reference arm run longer (or shorter) to the arm's training FLOPs: steps x
  (FLOPs per token of the arm / of the reference), rounded, at the same batch, so the control
  sees that many more tokens.
An arm within 1% of the reference (parameters, or FLOPs per token), or one for which no
candidate comes closer than the reference itself (the same width, or the same step count after
rounding), gets no control run: the reference is its match, and the Control says why.
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field

TOLERANCE = 0.01  # relative difference under which an arm needs no control
_FLAG = re.compile(r"^  --([a-z0-9][a-z0-9-]*)( \S+)?(  |$)")


class MatchError(Exception):
    pass


def flag_table(vtrain: str, command: str) -> dict[str, bool]:
    """{flag: takes a value} for a `vtrain COMMAND`, read from its --help."""
    r = subprocess.run([vtrain, command, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise MatchError(f"`vtrain {command} --help` failed: {r.stderr.strip()}")
    out = {}
    for line in r.stdout.splitlines():
        m = _FLAG.match(line)
        if m:
            out[m.group(1)] = m.group(2) is not None
    return out


def split_flags(args: list[str], takes_value: dict[str, bool]) -> list[tuple[str, str | None]]:
    """`vtrain train` arguments as (flag, value or None) pairs, in order. A flag the table does
    not know is an error (the caller names where it came from)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise MatchError(f"unexpected argument {a!r} (expected a --flag)")
        name, eq, val = a[2:].partition("=")
        if name not in takes_value:
            raise MatchError(f"unknown flag --{name}")
        if eq:
            out.append((name, val))
        elif takes_value[name]:
            if i + 1 >= len(args):
                raise MatchError(f"--{name} needs a value")
            out.append((name, args[i + 1]))
            i += 1
        else:
            out.append((name, None))
        i += 1
    return out


def join_flags(pairs: list[tuple[str, str | None]]) -> list[str]:
    out = []
    for k, v in pairs:
        out += [f"--{k}"] + ([v] if v is not None else [])
    return out


@dataclass
class Facts:
    params: float
    flops_per_token: float
    dim: int
    heads: int
    kv_heads: int
    head_dim: int


@dataclass
class Control:
    arm: str                    # the arm it controls
    label: str | None           # its own arm label, e.g. "baseline~params:bov"; None: the
                                # reference itself is the match (no run)
    overrides: dict = field(default_factory=dict)  # flag -> value replacing the reference's
    steps: int | None = None    # --match flops: its step count
    why: str = ""               # one line for ablate.md: what was matched and how close


class ModelFacts:
    """`vtrain plan --model-only --json` for a `vtrain train` command line's model flags (the
    train-only flags are dropped; plan takes every model flag train does)."""

    def __init__(self, vtrain: str, vocab: int):
        self.vtrain, self.vocab = vtrain, vocab
        self.train_flags = flag_table(vtrain, "train")
        self.plan_flags = flag_table(vtrain, "plan")
        self.cache: dict[tuple, Facts] = {}

    def of(self, train_args: list[str]) -> Facts:
        pairs = split_flags(train_args, self.train_flags)
        keep = [(k, v) for k, v in pairs if k in self.plan_flags and k != "vocab"]
        key = tuple(keep)
        if key not in self.cache:
            cmd = [self.vtrain, "plan", "--model-only", "--json", "--vocab", str(self.vocab),
                   *join_flags(keep)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise MatchError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
            j = json.loads(r.stdout)
            self.cache[key] = Facts(j["params"], j["flops_per_token"], j["dim"], j["heads"],
                                    j["kv_heads"], j["head_dim"])
        return self.cache[key]


def with_overrides(args: list[str], overrides: dict, takes_value: dict[str, bool]) -> list[str]:
    """`args` with each flag in `overrides` removed and given its new value (appended)."""
    pairs = [(k, v) for k, v in split_flags(args, takes_value) if k not in overrides]
    return join_flags(pairs + [(k, str(v)) for k, v in overrides.items()])


def widths(ref: Facts) -> list[dict]:
    """The candidate widths of the reference: the head size moved in steps of 2 (RoPE needs it
    even) from half to twice the reference's at its head count, and whole heads (kv heads
    keeping the group size) up to four times its heads at its head size."""
    group = max(1, ref.heads // max(1, ref.kv_heads))
    out = [{"dim": ref.heads * hd, "heads": ref.heads, "kv-heads": ref.kv_heads, "head-dim": hd}
           for hd in range(max(2, ref.head_dim // 2 // 2 * 2), 2 * ref.head_dim + 1, 2)]
    out += [{"dim": h * ref.head_dim, "heads": h, "kv-heads": h // group,
             "head-dim": ref.head_dim} for h in range(group, 4 * ref.heads + 1, group)]
    return out


def params_control(facts: ModelFacts, ref_args: list[str], arm_args: list[str], arm: str,
                   ref_label: str) -> Control:
    ref, want = facts.of(ref_args), facts.of(arm_args)
    off = 100 * (ref.params / want.params - 1)
    if abs(want.params - ref.params) <= TOLERANCE * ref.params:
        return Control(arm, None, why=f"`{ref_label}` has {off:+.1f}% of `{arm}`'s parameters "
                                      f"(within {100 * TOLERANCE:.0f}%): it is the match")
    best = None
    for w in widths(ref):
        got = facts.of(with_overrides(ref_args, w, facts.train_flags)).params
        if best is None or abs(got - want.params) < abs(best[1] - want.params):
            best = (w, got)
    w, got = best
    if (w["dim"], w["heads"], w["head-dim"]) == (ref.dim, ref.heads, ref.head_dim):
        return Control(arm, None, why=f"no width comes closer than `{ref_label}`'s own "
                                      f"({off:+.1f}% of `{arm}`'s parameters): it is the match")
    return Control(arm, f"{ref_label}~params:{arm}", overrides=w,
                   why=f"`{ref_label}` at --dim {w['dim']} (--heads {w['heads']}, --kv-heads "
                       f"{w['kv-heads']}, --head-dim {w['head-dim']}): {got / 1e6:.3f}M parameters against `{arm}`'s "
                       f"{want.params / 1e6:.3f}M ({100 * (got / want.params - 1):+.1f}%)")


def flops_control(facts: ModelFacts, ref_args: list[str], arm_args: list[str], arm: str,
                  ref_label: str, steps: int) -> Control:
    ref, want = facts.of(ref_args), facts.of(arm_args)
    ratio = want.flops_per_token / ref.flops_per_token
    n = max(1, round(steps * ratio))
    if abs(ratio - 1) <= TOLERANCE or n == steps:
        return Control(arm, None, why=f"`{arm}` costs {ratio:.4f}x `{ref_label}`'s FLOPs per "
                                      f"token; {steps} steps round to {n}: `{ref_label}` is "
                                      f"the match")
    return Control(arm, f"{ref_label}~flops:{arm}", steps=n,
                   why=f"`{ref_label}` for {n} steps instead of {steps}: `{arm}` costs "
                       f"{ratio:.4f}x its FLOPs per token ({want.flops_per_token / 1e6:.2f} vs "
                       f"{ref.flops_per_token / 1e6:.2f} MFLOP), so equal training FLOPs "
                       f"({100 * (n * ref.flops_per_token / (steps * want.flops_per_token) - 1):+.2f}%"
                       f" after rounding)")
