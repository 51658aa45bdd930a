#!/usr/bin/env python3
# scripts/window_results.py owns turning the GPU window's numbers.json (scripts/device_window.sh)
# into the repository's records of it. It owns three outputs and nothing else:
#   bench/results/gpu-window-<date>-measured.json  the measured column of bench/static_report.py
#       (`--measured FILE`): a flat JSON {static report row name: seconds per micro-step}, built
#       from train.profile_ms_per_step through OP_TO_ROWS below;
#   bench/results/plan_calibration.json  the numbers `vtrain plan --calibrate` reads (issue
#       28): MFU, tok/s, micro-batch, memory per preset and vtrain's GEMM TFLOP/s per shape,
#       merged with the file already there (other presets kept, the newest window wins per preset
#       and per GEMM shape);
#   docs/status.md's GPU status block: the lines between `<!-- gpu-window:begin -->` and
#       `<!-- gpu-window:end -->` (nothing else in docs/status.md is touched; without the markers
#       the block is printed and docs/status.md is left alone).
#
#   python3 scripts/window_results.py NUMBERS.json [--repo ROOT] [--dry-run] [--allow-emulated]
#
# --repo: the checkout to write into (default: the one holding this script). --dry-run prints
# every file it would write, and the status block, without writing anything.
#
# Emulation: numbers.json from the CUDA emulation (`"emulated": true`, a device named as an
# emulation, or no "emulated" field at all) is refused (exit 2) unless --allow-emulated is given.
# With it, every output is labelled "EMULATED (not a GPU number)": the measured file's name and
# every key in it (so bench/static_report.py shows none of them in its measured column), a
# separate bench/results/plan_calibration-EMULATED.json (plan_calibration.json itself is never
# written from an emulation), and every line of the status block.
#
# A stage that failed leaves its part of numbers.json out: whatever is missing is written as
# "not measured (stage <name>: <status>)" and listed at the end of the printout; the rest is
# still written. Exit status: 0 written (or dry run), 1 an output could not be written (malformed
# status markers, unreadable plan_calibration.json), 2 refused input.
#
# Units: `vtrain train --profile` reports milliseconds per optimizer step (core/op_profile.h; with
# a host clock, a device kernel's time is what the host spends launching it). The static
# report's rows are per micro-step with the optimizer amortized over the micro-steps of an
# optimizer step, so the profile is divided by train.global_batch / (micro_batch x seq_len) when
# numbers.json records global_batch (tokens), else taken as one micro-step per step (as
# device_window.sh runs it; said in the printout). train.profile_clock ("device events" or "host
# time", scripts/window_numbers.py) is printed with the column.
# Standard library only.
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

LABEL = "EMULATED (not a GPU number)"
BEGIN, END = "<!-- gpu-window:begin -->", "<!-- gpu-window:end -->"
STATUS = "docs/status.md"  # the page holding the block, relative to the repository root
JOIN = " & "  # joins the rows one profile op covers into one measured key
CALIBRATION_NOTE = ("read by `vtrain plan --calibrate FILE` (the --preset entry's mfu replaces "
                    "the assumed --mfu)")

# Profile op -> static report rows.
# Left: the op names `vtrain train --profile` prints, i.e. the names given to on("...") in
#   src/core/ops/*.cc and to op_profile::Scope in src/core/tensor.cc (host_alloc, host_alloc_zeroed,
#   zero_fill, tensor_copy) and src/optim/muon.cc (newton_schulz: the host Newton-Schulz; on a
#   device Muon's Newton-Schulz runs through ops::gemm, transpose, normalize_frobenius and copy).
# Right: the row names of bench/static_report.py, the add("...") calls of step_rows and the
#   Row("...") entries of optimizer_rows. Several ops may sum into one row. An op whose time
#   covers several rows (gemm: every GEMM of the step and Muon's; attention_backward: its three
#   kernels) cannot be split by the profile: those rows are measured together, under the key
#   "ROW & ROW & ..." (the static report shows no single row for it; row names contain "+" but no
#   "&"). () = an op the static report models no row for; it goes under "(unmapped) <op>" like an
#   op missing from this table.
# tests/launch/test_window_results.py checks both sides against those files.
OP_TO_ROWS: dict[str, tuple[str, ...]] = {
    "gemm": ("GEMM forward (x W)", "GEMM backward dx (dy W^T)", "GEMM backward dW (x^T dy, fp32)",
             "Muon Newton-Schulz GEMMs (5 steps, bf16)"),
    "attention": ("attention forward",),
    "attention_backward": ("attention backward D", "attention backward dQ",
                           "attention backward dK dV"),
    "rmsnorm": ("rmsnorm forward (x)",),
    "rmsnorm_backward": ("rmsnorm backward (x)",),
    "add_rmsnorm": ("residual add + rmsnorm forward (fused)",),
    "rope_rmsnorm": ("rope + QK-norm (fused)",),
    "rope_rmsnorm_backward": ("rope + QK-norm (fused)",),  # its own kernel off tensor cores
    "relu2": ("relu^2 forward + backward",),
    "relu2_backward": ("relu^2 forward + backward",),
    "relu": ("relu^2 forward + backward",),  # --mlp-act relu: the same place in the step
    "relu_backward": ("relu^2 forward + backward",),
    "axpy": ("residual adds (axpy)",),
    "tensor_copy": ("copies (block input x)",),
    "embedding": ("embedding gather + scatter-add",),
    "embedding_backward": ("embedding gather + scatter-add",),
    "xent_loss_grad": ("cross entropy forward + backward (fused)",),
    # The unfused pieces: the vocabulary-sharded head (tp > 1) and evaluation's forward.
    "xent_partial": ("cross entropy forward + backward (fused)",),
    "xent_rescale": ("cross entropy forward + backward (fused)",),
    "xent_finish": ("cross entropy forward + backward (fused)",),
    "xent_backward": ("cross entropy forward + backward (fused)",),
    "newton_schulz": ("Muon Newton-Schulz GEMMs (5 steps, bf16)",),
    "transpose": ("Muon Newton-Schulz GEMMs (5 steps, bf16)",),
    "normalize_frobenius": ("Muon Newton-Schulz GEMMs (5 steps, bf16)",),
    "normalize_frobenius_segments": ("Muon Newton-Schulz GEMMs (5 steps, bf16)",),  # batched
    # --fp8 e4m3: the linear layers' GEMMs with their quantization passes (one op each).
    "gemm_fp8": ("GEMM forward (x W)", "GEMM backward dx (dy W^T)", "GEMM backward dW (x^T dy, fp32)"),
    "muon_momentum": ("Muon momentum + apply",),
    "muon_apply": ("Muon momentum + apply",),
    "adamw_update": ("AdamW (embedding, lm_head)",),
    "copy": ("bf16 copy of the weights, zeroed gradients",),  # dtype casts: the f32 -> bf16 copy
    "zero_fill": ("bf16 copy of the weights, zeroed gradients",),
    # No row in the static report (not modelled there):
    "rope": (), "rope_backward": (),  # plain RoPE: only with --qk-norm off (and in decoding)
    "scale_copy": (), "dot": (), "sum_squares": (), "add_scalar": (), "scale_copy_coef": (),
    "axpy_coef": (), "dot_into": (), "copy_2d": (), "gate_sigmoid": (), "gated_mix": (),
    "gated_mix_backward": (), "gate_sigmoid_backward": (), "host_alloc": (),
    "host_alloc_zeroed": (),
    "step_guard": (),  # the gradient norm, clip and finite check on the device (--cuda-graphs step)
}


class Missing:
    """What numbers.json lacks, in order, for the printout's last lines."""

    def __init__(self):
        self.items: list[str] = []

    def add(self, what: str):
        if what not in self.items:
            self.items.append(what)


def stage_status(numbers: dict, name: str) -> str:
    for s in numbers.get("stages") or []:
        if isinstance(s, dict) and s.get("name") == name:
            return str(s.get("status", "no status"))
    return "no record"


def not_measured(numbers: dict, name: str) -> str:
    return f"not measured (stage {name}: {stage_status(numbers, name)})"


def section(numbers: dict, name: str, missing: Missing):
    v = numbers.get(name)
    if isinstance(v, dict) and v:
        return v
    missing.add(f"{name}: {not_measured(numbers, name)}")
    return None


def num(d: dict, key: str, where: str, missing: Missing):
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        missing.add(f"{where}.{key}" + (" (not a number)" if v is not None else ""))
        return None
    return v


def fmt(v, spec: str, none: str = "?") -> str:
    return none if v is None else format(v, spec)


def parse_date(s):
    if not isinstance(s, str):
        return None
    try:
        return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


# --- the measured column -----------------------------------------------------------------------
def row_groups() -> dict[str, str]:
    """Row -> the key its time is written under: rows that one op covers together are joined
    (transitively) into one "A & B" key, in the mapping's order."""
    parent: dict[str, str] = {}

    def find(r):
        while parent.setdefault(r, r) != r:
            r = parent[r]
        return r

    order: list[str] = []
    for rows in OP_TO_ROWS.values():
        for r in rows:
            if r not in order:
                order.append(r)
            find(r)
        for r in rows[1:]:
            parent[find(r)] = find(rows[0])
    members: dict[str, list[str]] = {}
    for r in order:
        members.setdefault(find(r), []).append(r)
    return {r: JOIN.join(members[find(r)]) for r in order}


def measured_column(profile: dict, micro_steps: float, missing: Missing):
    """(flat {key: seconds per micro-step}, unmapped op names, per-key op names)."""
    groups = row_groups()
    out: dict[str, float] = {}
    ops_of: dict[str, list[str]] = {}
    unmapped: list[str] = []
    for op, ms in profile.items():
        if isinstance(op, str) and op.startswith("("):  # "(all ops)", "(outside the ops)"
            continue
        if isinstance(ms, bool) or not isinstance(ms, (int, float)):
            missing.add(f"train.profile_ms_per_step.{op} (not a number)")
            continue
        rows = OP_TO_ROWS.get(op, ())
        key = groups[rows[0]] if rows else f"(unmapped) {op}"
        if not rows:
            unmapped.append(op)
        out[key] = out.get(key, 0.0) + ms / 1e3 / micro_steps
        ops_of.setdefault(key, []).append(op)
    return out, unmapped, ops_of


# --- plan calibration --------------------------------------------------------------------------
def calibration_entries(numbers: dict, stamp: dict, missing: Missing):
    presets: dict[str, dict] = {}
    for name in ("train", "bov"):
        s = numbers.get(name)
        if not isinstance(s, dict) or not s:
            continue
        preset = s.get("preset")
        if not isinstance(preset, str):
            missing.add(f"{name}.preset (calibration entry left out)")
            continue
        value = s.get("value")
        if not isinstance(value, str):
            missing.add(f"{name}.value (taken as baseline)")
            value = "baseline"
        key = preset if value == "baseline" else f"{preset}:{value}"
        e = {k: s[k] for k in ("mfu", "tok_per_s", "micro_batch", "seq_len", "peak_device_bytes")
             if isinstance(s.get(k), (int, float)) and not isinstance(s.get(k), bool)}
        if "mfu" not in e and "tok_per_s" not in e:
            missing.add(f"{name}: neither mfu nor tok_per_s (calibration entry left out)")
            continue
        e.update(value=value, **stamp)
        presets[key] = e
    gemms = []
    g = numbers.get("gemm")
    rows = g.get("rows") if isinstance(g, dict) else None
    for i, r in enumerate(rows if isinstance(rows, list) else []):
        if not isinstance(r, dict):
            continue
        if not all(isinstance(r.get(k), int) for k in ("M", "N", "K")) or \
                not isinstance(r.get("vtrain_tflops"), (int, float)):
            missing.add(f"gemm.rows[{i}]: M, N, K or vtrain_tflops (left out of the calibration)")
            continue
        e = {"name": r.get("name"), "M": r["M"], "N": r["N"], "K": r["K"],
             "tflops": r["vtrain_tflops"], **stamp}
        gemms.append(e)
    return presets, gemms


def newer_or_same(new: dict, old: dict) -> bool:
    dn, do = parse_date(new.get("date")), parse_date(old.get("date"))
    if dn is None:
        return do is None
    return do is None or dn >= do


def merge_calibration(old: dict, presets: dict, gemms: list, log: list) -> dict:
    out_presets = dict(old.get("presets") or {})
    for k, e in presets.items():
        if k in out_presets and not newer_or_same(e, out_presets[k]):
            log.append(f"calibration: kept {k} from {out_presets[k].get('date')} (newer than "
                       f"this window)")
        else:
            out_presets[k] = e
    by_shape = {(e.get("M"), e.get("N"), e.get("K")): e for e in old.get("gemm_tflops") or []
                if isinstance(e, dict)}
    for e in gemms:
        k = (e["M"], e["N"], e["K"])
        if k in by_shape and not newer_or_same(e, by_shape[k]):
            log.append(f"calibration: kept GEMM {k[0]}x{k[1]}x{k[2]} from "
                       f"{by_shape[k].get('date')} (newer than this window)")
        else:
            by_shape[k] = e
    entries = list(out_presets.values()) + list(by_shape.values())
    newest = max(entries, key=lambda e: parse_date(e.get("date")) or
                 dt.datetime.min.replace(tzinfo=dt.timezone.utc), default={})
    return {"schema": 1, "source": old.get("source", "gpu-window"), "date": newest.get("date"),
            "device": newest.get("device"), "commit": newest.get("commit"),
            "presets": out_presets, "gemm_tflops": list(by_shape.values()),
            "note": CALIBRATION_NOTE}


# --- status block ------------------------------------------------------------------------------
def gib(b):
    return None if b is None else b / 2**30


def run_line(numbers: dict, name: str, missing: Missing) -> str:
    s = section(numbers, name, missing)
    what = "training run (baseline)" if name == "train" else "training run (bov)"
    if s is None:
        return f"{what}: {not_measured(numbers, name)}"
    w = name
    preset, value = s.get("preset", "?"), s.get("value", "?")
    tok = num(s, "tok_per_s", w, missing)
    mfu = num(s, "mfu", w, missing)
    peak = num(s, "peak_device_bytes", w, missing)
    l0, l1 = num(s, "loss_first", w, missing), num(s, "loss_last", w, missing)
    mb, T, steps = s.get("micro_batch", "?"), s.get("seq_len"), s.get("steps")
    shape = f"micro-batch {mb}" + (f" x {T}" if T else "") + (f", {steps} steps" if steps else "")
    return (f"{preset} {value} ({shape}): {fmt(tok, ',.0f')} tok/s, MFU "
            f"{fmt(None if mfu is None else 100 * mfu, '.1f')}%, peak "
            f"{fmt(gib(peak), '.1f')} GiB, loss {fmt(l0, '.3f')} -> {fmt(l1, '.3f')}")


def find_attention_benches(node, path=""):
    """(label, windows dict) for every attention_bench JSON object inside `node`."""
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("windows"), dict):
            found.append((path, node["windows"]))
        for k, v in node.items():
            if k != "windows":
                found += find_attention_benches(v, f"{path} {k}".strip())
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += find_attention_benches(v, f"{path} [{i}]".strip())
    return found


def attention_lines(numbers: dict, missing: Missing) -> list[str]:
    s = section(numbers, "attention", missing)
    head = "attention, tensor cores vs reference kernels (TFLOP/s of useful work)"
    if s is None:
        return [f"{head}: {not_measured(numbers, 'attention')}"]
    benches = find_attention_benches(s)
    if not benches:
        missing.add("attention: no attention_bench `windows` object in it")
        return [f"{head}: recorded, but not in attention_bench's JSON form (keys: "
                f"{', '.join(map(str, s))})"]
    subs = []
    for label, windows in benches:
        for W, e in windows.items():
            where = f"attention{'.' + label if label else ''}.windows.{W}"
            if not isinstance(e, dict):
                missing.add(where)
                continue
            parts = []
            for p, name in (("fwd", "forward"), ("bwd", "backward")):
                tc = num(e, f"{p}_tc_tflops", where, missing)
                ref = num(e, f"{p}_ref_tflops", where, missing)
                ratio = tc / ref if tc is not None and ref else None
                parts.append(f"{name} {fmt(tc, '.1f')} vs {fmt(ref, '.1f')} "
                             f"({fmt(ratio, '.2f')}x)")
            # The v1 kernels (the 2026-11-26 window's), timed in the same call since issue 37:
            # old vs new on this GPU. Absent from older JSON: not a missing number.
            for p, name in (("fwd", "forward"), ("bwd", "backward")):
                v1 = e.get(f"{p}_v1_tflops")
                if isinstance(v1, (int, float)):
                    tc = e.get(f"{p}_tc_tflops")
                    gain = tc / v1 if isinstance(tc, (int, float)) and v1 else None
                    parts.append(f"{name} v1 {fmt(v1, '.1f')} (new {fmt(gain, '.2f')}x)")
            errs = [f"{what} {e[k]:.2g}" for k, what in (("out_max_abs_err", "out"),
                                                          ("grad_max_abs_err", "grads"))
                    if isinstance(e.get(k), (int, float))]
            if errs:
                parts.append("max |tc - ref| " + ", ".join(errs))
            subs.append(f"{label + ' ' if label else ''}window {W}: " + "; ".join(parts))
    return [head + ":"] + ["  - " + x for x in subs]


def gemm_lines(numbers: dict, missing: Missing) -> list[str]:
    s = section(numbers, "gemm", missing)
    head = "GEMM, vtrain (cuBLASLt) vs torch TFLOP/s (ratio)"
    if s is None:
        return [f"{head}: {not_measured(numbers, 'gemm')}"]
    rows = s.get("rows")
    if not isinstance(rows, list) or not rows:
        missing.add("gemm.rows")
        return [f"{head}: {not_measured(numbers, 'gemm')} (no rows)"]
    subs = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            missing.add(f"gemm.rows[{i}]")
            continue
        where = f"gemm.rows[{i}]"
        v = num(r, "vtrain_tflops", where, missing)
        t = num(r, "torch_tflops", where, missing)
        ratio = v / t if v is not None and t else None
        shape = "x".join(str(r.get(k, "?")) for k in ("M", "N", "K"))
        subs.append(f"{r.get('name', '?')} {shape}: {fmt(v, '.0f')} vs "
                    f"{fmt(t, '.0f', 'not measured')} ({fmt(ratio, '.2f')}x)")
    if isinstance(s.get("all_tflops"), (int, float)):
        t = s.get("torch_all_tflops")
        subs.append(f"FLOP-weighted (one layer + lm_head): vtrain {s['all_tflops']:.0f}"
                    + (f" vs torch {t:.0f} ({s['all_tflops'] / t:.2f}x)"
                       if isinstance(t, (int, float)) and t else ""))
    return [head + ":"] + ["  - " + x for x in subs]


def peer_line(numbers: dict, missing: Missing) -> str:
    """bench/bench_gpu_vs_torch.py's JSON: `results`, one per preset and mode, each with a `torch`
    object (tok_s) and a `vtrain` one (tok_s, or an error: with --only torch, as the window runs
    it, the vtrain side is the train stage's run of the same preset and mode)."""
    s = section(numbers, "torch_peer", missing)
    head = "PyTorch peer, same model"
    if s is None:
        return f"{head}: {not_measured(numbers, 'torch_peer')}"
    results = s.get("results")
    if not isinstance(results, list) or not results:
        missing.add("torch_peer.results")
        return f"{head}: {not_measured(numbers, 'torch_peer')} ({s.get('note') or 'no results'})"
    train = numbers.get("train") if isinstance(numbers.get("train"), dict) else {}
    parts = []
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            continue
        where = f"torch_peer.results[{i}]"
        tside = r.get("torch") if isinstance(r.get("torch"), dict) else {}
        vside = r.get("vtrain") if isinstance(r.get("vtrain"), dict) else {}
        t = num(tside, "tok_s", where + ".torch", missing)
        v, mv = vside.get("tok_s"), r.get("vtrain_mfu")
        if not isinstance(v, (int, float)) and train.get("preset") == r.get("preset") and \
                train.get("value") == r.get("mode"):
            v, mv = train.get("tok_per_s"), train.get("mfu")
        if not isinstance(v, (int, float)):
            missing.add(where + ".vtrain")
            v = None
        ratio = v / t if v is not None and t else None
        mt = r.get("torch_mfu")
        mfu = (f", MFU {100 * mv:.1f}% vs {100 * mt:.1f}%"
               if isinstance(mv, (int, float)) and isinstance(mt, (int, float)) else "")
        extra = []
        if tside.get("attn"):
            extra.append(f"torch attention {tside['attn']}"
                         + (", compiled" if tside.get("compiled") else ""))
        if isinstance(tside.get("peak_bytes"), (int, float)):
            extra.append(f"torch peak {tside['peak_bytes'] / 2**30:.1f} GiB")
        parts.append(f"{r.get('preset', '?')} {r.get('mode', '?')}: vtrain {fmt(v, ',.0f')} vs "
                     f"torch {fmt(t, ',.0f')} tok/s ({fmt(ratio, '.2f')}x){mfu}"
                     + (f" ({'; '.join(extra)})" if extra else ""))
    return f"{head}: " + "; ".join(parts)


def tests_line(numbers: dict, missing: Missing) -> str:
    s = section(numbers, "tests", missing)
    if s is None:
        return f"GPU tests: {not_measured(numbers, 'tests')}"
    p, f = num(s, "passed", "tests", missing), num(s, "failed", "tests", missing)
    t, sk = s.get("timed_out"), s.get("skipped")
    return (f"GPU tests: {fmt(p, 'g')} passed, {fmt(f, 'g')} failed"
            + (f", {t} timed out" if isinstance(t, int) else "")
            + (f", {sk} skipped" if isinstance(sk, int) else ""))


def status_block(numbers: dict, emulated: bool, missing: Missing) -> list[str]:
    date = numbers.get("date") if parse_date(numbers.get("date")) else None
    when = date.replace("T", " ").replace("Z", " UTC") if date else "undated"
    lines = [f"GPU window {when} on {numbers.get('device') or 'an unnamed device'}, commit "
             f"{numbers.get('commit') or 'unknown'} (scripts/device_window.sh; written by "
             f"scripts/window_results.py)",
             run_line(numbers, "train", missing), run_line(numbers, "bov", missing),
             *attention_lines(numbers, missing), *gemm_lines(numbers, missing),
             peer_line(numbers, missing), tests_line(numbers, missing)]
    out = []
    for l in lines:
        if l.startswith("  - "):
            out.append(l)
        else:
            out.append(f"- {LABEL}: {l}" if emulated else f"- {l}")
    return out


def replace_block(text: str, block: list[str]):
    """Status page text with the lines between the markers replaced, or (None, why)."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, l in enumerate(lines) if l.strip() == BEGIN]
    ends = [i for i, l in enumerate(lines) if l.strip() == END]
    if not begins and not ends:
        return None, "absent"
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        return None, (f"malformed: {len(begins)} begin and {len(ends)} end marker(s)"
                      + (", end before begin" if begins and ends and ends[0] < begins[0] else ""))
    nl = "\r\n" if lines[begins[0]].endswith("\r\n") else "\n"
    new = lines[:begins[0] + 1] + [l + nl for l in block] + lines[ends[0]:]
    return "".join(new), None


# --- main --------------------------------------------------------------------------------------
def refuse(msg: str) -> int:
    print(f"window_results: {msg}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write the GPU window's numbers into the repository "
                                             "(see the comment at the top of this file).")
    ap.add_argument("numbers", help="numbers.json written by scripts/device_window.sh")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--dry-run", action="store_true", help="print what would be written")
    ap.add_argument("--allow-emulated", action="store_true",
                    help="accept numbers from the CUDA emulation, labelled as such")
    args = ap.parse_args(argv)
    repo = Path(args.repo)

    try:
        numbers = json.loads(Path(args.numbers).read_text())
    except (OSError, ValueError) as e:
        return refuse(f"cannot read {args.numbers}: {e}")
    if not isinstance(numbers, dict):
        return refuse(f"{args.numbers} is not a JSON object")
    if numbers.get("schema", 1) != 1:
        return refuse(f"{args.numbers} has schema {numbers.get('schema')!r}; this script reads 1")
    flag, device = numbers.get("emulated"), str(numbers.get("device") or "")
    emulated = flag is not False or "emulat" in device.lower()
    if emulated and not args.allow_emulated:
        why = ("says \"emulated\": true" if flag is True else
               "has no \"emulated\" field" if flag is None else
               f"has \"emulated\": {flag!r}" if flag is not False else f"names device {device!r}")
        return refuse(f"refused: {args.numbers} {why}, so its numbers may come from the CUDA "
                      f"emulation, not a GPU (--allow-emulated writes them labelled {LABEL})")

    missing = Missing()
    if not isinstance(numbers.get("facts"), dict):
        missing.add(f"facts: {not_measured(numbers, 'facts')}")
    if "schema" not in numbers:
        missing.add("schema (read as 1)")
    for k in ("date", "device", "commit"):
        if not numbers.get(k):
            missing.add(k)
    date = numbers.get("date")
    when = parse_date(date)
    if date and when is None:
        missing.add(f"date {date!r} (not YYYY-MM-DDTHH:MM:SSZ; written as undated)")
    stamp = {"date": date if when else None, "device": numbers.get("device"),
             "commit": numbers.get("commit")}
    if emulated:
        stamp["label"] = LABEL  # on every calibration entry too
    file_stamp = when.strftime("%Y-%m-%dT%H%M%SZ") if when else "undated"
    results = repo / "bench" / "results"
    say = (lambda m: print(f"[{LABEL}] {m}")) if emulated else print
    if emulated:
        say(f"{args.numbers}: numbers from the CUDA emulation; every output is labelled {LABEL}")
    writes: list[tuple[Path, str]] = []
    rc = 0

    # 1. The static report's measured column.
    train = numbers.get("train") if isinstance(numbers.get("train"), dict) else {}
    profile = train.get("profile_ms_per_step")
    if isinstance(profile, dict) and profile:
        mb, T, gb = train.get("micro_batch"), train.get("seq_len"), train.get("global_batch")
        micro_steps = 1.0
        if all(isinstance(x, int) and x > 0 for x in (mb, T, gb)) and gb % (mb * T) == 0:
            micro_steps = gb // (mb * T)
        else:  # device_window.sh runs --global-batch = micro_batch x seq_len
            say("note: train.global_batch not recorded: the profile is taken as one micro-step "
                "per optimizer step")
        col, unmapped, ops_of = measured_column(profile, micro_steps, missing)
        if emulated:
            col = {f"{LABEL}: {k}": v for k, v in col.items()}
        name = f"gpu-window-{file_stamp}{'-EMULATED' if emulated else ''}-measured.json"
        path = results / name
        writes.append((path, json.dumps(col, indent=1) + "\n"))
        clock = train.get("profile_clock")
        say(f"measured column ({path.relative_to(repo)}), seconds per micro-step "
            f"(profile / {micro_steps:g}; profile clock: {clock or 'not recorded'}):")
        if clock != "device events":
            say("  caution: unless the profile timed device events, a GPU kernel's time here is "
                "the host's launch time, not the kernel's")
        for k, v in sorted(col.items(), key=lambda kv: -kv[1]):
            plain = k.split(": ", 1)[1] if emulated else k
            say(f"  {v * 1e3:10.3f} ms  {k}  <- {', '.join(ops_of[plain])}")
        joined = [k for k in col if JOIN in k]
        if joined:
            say("  rows measured only together (one profile op covers them; the static report "
                "has no single row for these keys): " + "; ".join(joined))
        if unmapped:
            say("  unmapped ops (no static report row): " + ", ".join(unmapped))
        if not emulated:
            tokens = gb if isinstance(gb, int) else (
                mb * T if isinstance(mb, int) and isinstance(T, int) else None)
            tok = f" --tokens-per-optimizer-step {tokens}" if tokens else ""
            say(f"  compare: .venv/bin/python bench/static_report.py --presets "
                f"{train.get('preset', 'd24')} --micro-batch {train.get('preset', 'd24')}:"
                f"{mb if isinstance(mb, int) else 16}{tok} --measured {path.relative_to(repo)}")
    else:
        why = (not_measured(numbers, "train") if not train
               else "train has no profile_ms_per_step")
        if train:
            missing.add("train.profile_ms_per_step")
        say(f"measured column: not written ({why})")

    # 2. Plan calibration.
    presets, gemms = calibration_entries(numbers, stamp, missing)
    cal_path = results / ("plan_calibration-EMULATED.json" if emulated
                          else "plan_calibration.json")
    if presets or gemms:
        old, log = {}, []
        if cal_path.exists():
            try:
                old = json.loads(cal_path.read_text())
                if not isinstance(old, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as e:
                old = None
                say(f"calibration: NOT written: {cal_path} exists but cannot be read ({e}); "
                    f"fix or remove it and rerun")
                rc = 1
        if old is not None:
            cal = merge_calibration(old, presets, gemms, log)
            if emulated:
                cal["source"] = LABEL
                cal["note"] = f"{LABEL}: a rehearsal on the CUDA emulation; " + CALIBRATION_NOTE
            writes.append((cal_path, json.dumps(cal, indent=1) + "\n"))
            for m in log:
                say(m)
            say(f"calibration ({cal_path.relative_to(repo)}): presets "
                f"{', '.join(presets) or 'none'} and {len(gemms)} GEMM shape(s) from this window")
    else:
        say("calibration: nothing to write (no training numbers, no GEMM rows)")

    # 3. The status block of docs/status.md.
    block = status_block(numbers, emulated, missing)
    status_page = repo / STATUS
    try:
        text = status_page.read_text()
    except OSError as e:
        text, why = None, f"cannot be read ({e})"
    if text is not None:
        new, why = replace_block(text, block)
        if new is not None:
            writes.append((status_page, new))
    if text is None or new is None:
        print("status block:\n" + "\n".join(block))
        if why == "absent":
            say(f"{STATUS}: NOT updated: it has no {BEGIN} / {END} lines. Add those two lines "
                f"where the GPU status belongs and rerun (or paste the block above between them)")
        else:
            say(f"{STATUS}: NOT updated: markers {why}")
            rc = 1

    # Write (or show).
    for path, content in writes:
        if args.dry_run:
            if path == status_page:
                print(f"--- would replace {STATUS}'s {BEGIN} block with:\n" + "\n".join(block))
            else:
                print(f"--- would write {path}:\n{content}", end="")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(content)
            os.replace(tmp, path)
            say(f"wrote {path}")
    if missing.items:
        say("missing from " + args.numbers + ":")
        for m in missing.items:
            say(f"  - {m}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
