#!/usr/bin/env python3
# scripts/window_numbers.py owns the numbers of the GPU window (scripts/device_window.sh): it turns
# each stage's raw output (metrics lines, the --profile table, gtest JSON reports, the benchmarks'
# JSON) into one fragment per stage, then merges the fragments into numbers.json and the summary
# the window prints last. Standard library only: it runs with any python3 (the GPU machine's, or
# the test venv on the CUDA emulation).
"""GPU-window numbers: per-stage fragments, then numbers.json and summary.txt.

    window_numbers.py train METRICS.jsonl LOG OUT.json --preset d24 --value baseline --mb 16 --seq 2048
    window_numbers.py tests REPORT_DIR OUT.json          (gtest JSON reports + status lines)
    window_numbers.py cli JUNIT.xml OUT.json
    window_numbers.py merge WORK_DIR NUMBERS.json SUMMARY.txt

Formats: docs/gpu-session.md, "The summary and numbers.json".
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import xml.etree.ElementTree as ET

STAGES = ("facts", "attention", "train", "tests", "gemm", "torch_peer", "graphs", "fp8", "bov",
          "cli")


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def parse_profile(log_text: str) -> dict:
    """The `--profile` table rank 0 prints: {op: ms per step} and {op: calls per step} (what the
    step model, bench/step_model.py, needs to split a row by its kernels), the time outside the
    ops, and the table's clock ("device events" or "host time")."""
    out, calls, outside, clock, inside = {}, {}, None, None, False
    for line in log_text.splitlines():
        if line.startswith("op profile of rank 0"):
            inside, out, calls, outside = True, {}, {}, None
            clock = "device events" if "device ops timed by" in line else "host time"
            continue
        if not inside:
            continue
        parts = line.split()
        if not parts or parts[0] == "op":
            continue
        if parts[0] == "(all":
            continue
        if parts[0] == "(outside":
            try:
                outside = float(parts[3])
            except (IndexError, ValueError):
                pass
            break
        try:
            out[parts[0]] = float(parts[2])
            calls[parts[0]] = float(parts[1])
        except (IndexError, ValueError):
            break
    if not out:
        return {}
    frag = {"profile_ms_per_step": out, "profile_calls_per_step": calls, "profile_clock": clock}
    if outside is not None:
        frag["profile_outside_ms_per_step"] = outside
    return frag


def train_fragment(metrics: str, log: str, preset, value, mb, seq) -> dict:
    rows = []
    try:
        with open(metrics) as f:
            for line in f:
                line = line.strip()
                if line:
                    r = json.loads(line)
                    if "loss" in r and "tok_per_s" in r:
                        rows.append(r)
    except OSError:
        pass
    # One micro-batch per optimizer step (device_window.sh's runs): global batch = mb x T tokens.
    frag = {"preset": preset, "value": value, "micro_batch": int(mb), "seq_len": int(seq),
            "global_batch": int(mb) * int(seq), "steps": len(rows)}
    if rows:
        # Speed from the steps after the first quarter (start-up, plan caches, allocator growth).
        timed = rows[max(1, len(rows) // 4):] or rows
        frag["tok_per_s"] = statistics.median(r["tok_per_s"] for r in timed)
        frag["mfu"] = statistics.median(r["mfu"] for r in timed)
        peaks = [r["device_peak_bytes"] for r in rows if r.get("device_peak_bytes")]
        if peaks:
            frag["peak_device_bytes"] = max(peaks)
        frag["loss_first"], frag["loss_last"] = rows[0]["loss"], rows[-1]["loss"]
        frag["losses"] = [r["loss"] for r in rows]
    try:
        with open(log, errors="replace") as f:
            frag.update(parse_profile(f.read()))
    except OSError:
        pass
    return frag


def tests_fragment(report_dir: str) -> dict:
    """Each binary's gtest JSON report (BIN.json) and its status line (BIN.status: ok, failed,
    timeout)."""
    passed = failed = skipped = 0
    binaries = {}
    for name in sorted(os.listdir(report_dir)):
        if not name.endswith(".status"):
            continue
        b = name[: -len(".status")]
        with open(os.path.join(report_dir, name)) as f:
            status = f.read().strip()
        rep = _load(os.path.join(report_dir, b + ".json")) or {}
        p = f_ = s = 0
        for suite in rep.get("testsuites", []):
            for t in suite.get("testsuite", []):
                if t.get("failures"):
                    f_ += 1
                elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                    s += 1
                else:
                    p += 1
        passed, failed, skipped = passed + p, failed + f_, skipped + s
        binaries[b] = {"status": status, "passed": p, "failed": f_, "skipped": s}
    bad = [b for b, v in binaries.items() if v["status"] != "ok"]
    return {"passed": passed, "failed": failed, "skipped": skipped,
            "timed_out": sum(v["status"] == "timeout" for v in binaries.values()),
            "binaries": binaries, "not_ok": bad}


def cli_fragment(junit: str) -> dict:
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return {}
    cases = root.iter("testcase")
    out = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    for c in cases:
        name = c.get("name")
        if c.find("failure") is not None or c.find("error") is not None:
            out["failed"] += 1
            out["failures"].append(name)
        elif c.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def _kv(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    out[k] = v
    except OSError:
        pass
    return out


def _gib(b):
    return f"{b / 2**30:.1f} GiB" if b else "peak n/a"


def headline(stage: str, d: dict, train: dict | None = None) -> str:
    """One line per stage for the summary: the decisive numbers (`train`: the train stage's
    fragment, the vtrain side of the PyTorch peer)."""
    train = train or {}
    if not d:
        return ""
    if stage == "facts":
        ok = d.get("libs_ok", "?")
        return (f"{d.get('gpu', '?')}, driver {d.get('driver', '?')}; glibc {d.get('glibc', '?')} "
                f"(needs {d.get('bundle_needs_glibc', '?')}), {d.get('glibcxx_max', '?')} (needs "
                f"{d.get('bundle_needs_glibcxx', '?')}): {d.get('abi_ok', '?')}; libraries "
                f"resolve: {ok}; torch {d.get('torch', 'absent')}; vtrain devices: "
                f"{d.get('devices', '?')}, mpirun -np 2: {d.get('mpirun_devices', '?')}")
    if stage == "attention":
        parts = []
        for w, r in (d.get("windows") or {}).items():
            parts.append(f"W{w} fwd {r['fwd_tc_tflops']:.0f} vs {r['fwd_ref_tflops']:.0f} TF/s, "
                         f"bwd {r['bwd_tc_tflops']:.0f} vs {r['bwd_ref_tflops']:.0f} (tc vs ref); "
                         f"rel err out {r['out_rel_err']:.1e} grads {r['grad_rel_err']:.1e}")
        return " | ".join(parts)
    if stage == "graphs":
        # --cuda-graphs off / micro-step / step at the train stage's shape, without --profile.
        base = (d.get("off") or {}).get("tok_per_s")
        parts = []
        for g in ("off", "micro-step", "step"):
            r = d.get(g) or {}
            if "tok_per_s" not in r:
                parts.append(f"{g}: no step finished")
                continue
            rel = f" ({r['tok_per_s'] / base - 1:+.1%})" if base and g != "off" else ""
            parts.append(f"{g} {r['tok_per_s']:,.0f} tok/s{rel}")
        return "--cuda-graphs " + ", ".join(parts)
    if stage in ("train", "bov", "fp8"):
        if "tok_per_s" not in d:
            return f"{d.get('preset')} {d.get('value')}: no step finished"
        fell = "falls" if d["loss_last"] < d["loss_first"] else "DOES NOT FALL"
        # fp8: the train stage's run under --fp8 e4m3, its speed against train's (bf16).
        vs = (f" ({d['tok_per_s'] / train['tok_per_s']:.2f}x train's bf16)"
              if stage == "fp8" and train.get("tok_per_s") else "")
        return (f"{'--fp8 e4m3 ' if stage == 'fp8' else ''}"
                f"{d['preset']} {d['value']} mb{d['micro_batch']} T{d['seq_len']}{vs}: "
                f"{d['tok_per_s']:,.0f} tok/s, MFU {100 * d['mfu']:.1f}%, "
                f"{_gib(d.get('peak_device_bytes'))}, loss {d['loss_first']:.3f} -> "
                f"{d['loss_last']:.3f} over {d['steps']} steps ({fell})"
                + (f"; profile by {d['profile_clock']}" if d.get("profile_clock") else ""))
    if stage == "tests":
        s = (f"{d['passed']} passed, {d['failed']} failed, {d['skipped']} skipped, "
             f"{d['timed_out']} binaries timed out ({len(d['binaries'])} binaries)")
        if d.get("not_ok"):
            s += "; not ok: " + ", ".join(d["not_ok"])
        return s
    if stage == "gemm":
        s = f"vtrain cuBLASLt {d.get('all_tflops', 0):.1f} TF/s FLOP-weighted"
        if d.get("torch_all_tflops"):
            s += f", torch {d['torch_all_tflops']:.1f}: {d['all_ratio']:.2f}x"
        elif d.get("torch"):
            s += f"; torch {d['torch']}"
        return s
    if stage == "torch_peer":
        # bench_gpu_vs_torch.py --only torch: the vtrain side is the train stage's run.
        out = []
        for r in d.get("results") or []:
            t = (r.get("torch") or {}).get("tok_s")
            v = train.get("tok_per_s") if (train.get("value") == r.get("mode") and
                                           train.get("preset") == r.get("preset")) else None
            if t and v:
                out.append(f"{r['preset']} {r['mode']}: vtrain {v:,.0f} vs torch {t:,.0f} tok/s "
                           f"= {v / t:.2f}x")
            else:
                err = (r.get("torch") or {}).get("error", "no number")
                out.append(f"{r.get('preset')} {r.get('mode')}: torch {t or err}")
        return " | ".join(out) or d.get("note", "")
    if stage == "cli":
        s = f"{d.get('passed', 0)} passed, {d.get('failed', 0)} failed, {d.get('skipped', 0)} skipped"
        if d.get("failures"):
            s += ": " + ", ".join(d["failures"])
        return s
    return ""


def merge(work: str, numbers_path: str, summary_path: str) -> None:
    meta = _kv(os.path.join(work, "meta.kv"))
    emulated = meta.get("emulated") == "1"
    stages = []
    try:
        with open(os.path.join(work, "stages.tsv")) as f:
            for line in f:
                name, status, rc, secs = line.rstrip("\n").split("\t")[:4]
                stages.append({"name": name, "status": status, "rc": int(rc),
                               "seconds": float(secs)})
    except OSError:
        pass
    num = {"schema": 1, "date": meta.get("date"), "emulated": emulated,
           "device": meta.get("device"), "commit": meta.get("commit"),
           "deadline_s": float(meta.get("deadline", 0) or 0), "stages": stages}
    frags = {}
    facts = _kv(os.path.join(work, "numbers", "facts.kv"))
    if facts:
        frags["facts"] = facts
    for s in STAGES[1:]:
        d = _load(os.path.join(work, "numbers", s + ".json"))
        if d is not None:
            frags[s] = d
    num.update(frags)
    gpu = frags.get("facts", {}).get("gpu", "") or meta.get("gpu", "")
    if gpu and not gpu.startswith("none") and not emulated:
        num["device"] = gpu
    with open(numbers_path, "w") as f:
        json.dump(num, f, indent=1)

    if not num.get("device"):
        num["device"] = "unknown"
    if emulated:
        label = "EMULATED: the CUDA emulation on the CPU; every timing below is meaningless"
    elif gpu and not gpu.startswith("none"):
        label = "REAL GPU"
    else:
        label = "NO GPU FOUND"
    lines = [f"vtrain GPU window {num['date']} | {num['device']} | commit {num['commit']} | {label}",
             f"{'stage':11s} {'status':9s} {'s':>5s}  numbers"]
    by_name = {s["name"]: s for s in stages}
    for name in STAGES:
        st = by_name.get(name)
        if st is None:
            lines.append(f"{name:11s} {'not run':9s} {'':>5s}")
            continue
        try:
            head = headline(name, frags.get(name, {}), frags.get("train"))
        except (KeyError, TypeError, ValueError) as e:
            head = f"(numbers unreadable: {e!r})"
        lines.append(f"{name:11s} {st['status']:9s} {st['seconds']:5.0f}  {head}")
    total = sum(s["seconds"] for s in stages)
    bad = [s["name"] for s in stages if s["status"] in ("failed", "timeout")]
    lines.append(f"total {total:.0f} s of the {num['deadline_s']:.0f} s deadline; "
                 + ("every stage ok or skipped" if not bad else "not ok: " + ", ".join(bad)))
    with open(summary_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "train":
        metrics, log, out = argv[2:5]
        opts = dict(zip(argv[5::2], argv[6::2]))
        frag = train_fragment(metrics, log, opts.get("--preset"), opts.get("--value"),
                              opts.get("--mb", 0), opts.get("--seq", 0))
        with open(out, "w") as f:
            json.dump(frag, f, indent=1)
        return 0 if frag.get("steps") else 1
    if cmd == "tests":
        with open(argv[3], "w") as f:
            json.dump(tests_fragment(argv[2]), f, indent=1)
        return 0
    if cmd == "cli":
        with open(argv[3], "w") as f:
            json.dump(cli_fragment(argv[2]), f, indent=1)
        return 0
    if cmd == "merge":
        merge(argv[2], argv[3], argv[4])
        return 0
    print(f"window_numbers.py: unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
