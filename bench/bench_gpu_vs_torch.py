#!/usr/bin/env python3
# bench/bench_gpu_vs_torch.py owns the GPU training-throughput benchmark of vtrain against a tuned
# PyTorch implementation of the identical model (bench/torch_model.py: bf16 autocast,
# torch.compile, flash SDPA / flex_attention, batched bf16 Newton-Schulz Muon, fused AdamW), on the
# same GPU, in one run. It prints tokens/s of each side, the ratio vtrain/pytorch, MFU against a
# given bf16 dense peak, and the peak GPU memory of each; it never asserts on speed.
"""Time full training steps (forward, backward, optimizer) of vtrain and of PyTorch on one GPU.

    python3 bench/bench_gpu_vs_torch.py --presets d12,d24 --modes baseline,bov --seq-len 2048 \\
        --micro-batch 8 --steps 20 --warmup 10 --peak-tflops 989 --vtrain-build build

Both sides: one micro-batch of B x T tokens per step (vtrain --global-batch = B*T), the same model
(preset, value mode, vocabulary of the data), the same optimizers and schedules, --warmup + --steps
steps; tok/s = median over the --steps steps after the --warmup untimed ones (which include
torch.compile's compilation). vtrain: `vtrain train ... --device cuda` with --metrics, tok/s from
the per-step `tok_per_s` records, peak memory from their `device_peak_bytes` (n/a when vtrain does
not log it). PyTorch: a fresh process per row (bench_gpu_vs_torch.py --_torch-worker), each step
timed with torch.cuda.synchronize, peak memory = torch.cuda.max_memory_allocated (reserved in
parentheses). MFU = tok/s x FLOPs/token / (--peak-tflops x 1e12), FLOPs/token from vtrain's
src/model/flops.cc (ported in torch_model.Config.flops_per_token). Without --data, a synthetic
data directory (uniform random tokens, vocabulary 32768) is made with `vtrain prepare`.
A failing side (exit status, OOM, timeout) is reported in its row; the other rows still run.
See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

MODEL_RE = re.compile(r"model: (\d+) layers, d=(\d+), (\d+) heads \((\d+) kv\), T=(\d+), "
                      r"vocab (\d+) \| ([\d.]+)M params")
# Per-step peak-memory fields vtrain may log (the first one present is used).
PEAK_FIELDS = ("device_peak_bytes", "gpu_peak_bytes", "peak_device_bytes", "device_mem_peak_bytes")


def _join_flag_values(argv, flags):
    """`--vtrain-extra-args '--recompute block'`: argparse would take the value for a flag of its own,
    so the value is glued on as `--vtrain-extra-args='--recompute block'`."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in flags and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description="vtrain (GPU) vs PyTorch training-step throughput")
    p.add_argument("--presets", default="d12,d24", help="model presets, comma-separated (d12,d24)")
    p.add_argument("--modes", default="baseline,bov", help="value modes, comma-separated")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", default="8",
                   help="rows of T tokens per step: one number for every preset, or per preset "
                        "as d12=16,d24=8 (8)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per side and row (20)")
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed steps first (compilation, allocator warm-up) (10)")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="bf16 dense peak for MFU, TFLOP/s (989: H100 SXM; H200 the same)")
    p.add_argument("--data", default=None, help="a `vtrain prepare` data directory; default: "
                   "synthetic (uniform random tokens, vocabulary --synthetic-vocab)")
    p.add_argument("--synthetic-vocab", type=int, default=32768)
    p.add_argument("--vtrain-build", default=os.environ.get("VTRAIN_BUILD", "build"),
                   help="build directory holding the vtrain binary (build)")
    p.add_argument("--vtrain", default=None, help="the vtrain binary (overrides --vtrain-build)")
    p.add_argument("--vtrain-device", default="cuda",
                   help="value of vtrain's --device ('none': pass no --device flag) (cuda)")
    p.add_argument("--vtrain-extra-args", default="",
                   help="extra `vtrain train` arguments, one shell-quoted string "
                        "(e.g. '--recompute block')")
    p.add_argument("--vtrain-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment of the vtrain runs (repeatable)")
    p.add_argument("--torch-device", default="cuda", help="device of the PyTorch side (cuda)")
    p.add_argument("--torch-attn", default="auto", choices=("auto", "flex", "sdpa", "math"),
                   help="attention of the sliding-window layers: flex_attention with a "
                        "causal+window block mask, or SDPA with an explicit mask; full layers "
                        "always use SDPA is_causal (flash) except 'math' (auto: flex if available)")
    p.add_argument("--no-torch-compile", action="store_true", help="run PyTorch eagerly")
    p.add_argument("--torch-compile-mode", default="default",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("--torch-ns-dtype", default="bf16", choices=("bf16", "fp32"),
                   help="Newton-Schulz dtype of the PyTorch Muon (bf16: nanochat/modded-nanogpt)")
    p.add_argument("--only", default="both", choices=("both", "vtrain", "torch"))
    p.add_argument("--timeout", type=int, default=1800, help="seconds per side and row (1800)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write every number as JSON to this file")
    p.add_argument("--keep", default=None, help="keep the work files (data, metrics) here")
    p.add_argument("--_torch-worker", dest="torch_worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(_join_flag_values(list(argv), ("--vtrain-extra-args",)))
    if a.torch_worker is not None:
        return a
    a.presets = [x.strip() for x in a.presets.split(",") if x.strip()]
    a.modes = [x.strip() for x in a.modes.split(",") if x.strip()]
    a.batch = {}
    for part in a.micro_batch.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            a.batch[k.strip()] = int(v)
        else:
            a.batch = {pr: int(part) for pr in a.presets}
    missing = [pr for pr in a.presets if pr not in a.batch]
    if missing:
        p.error(f"--micro-batch gives no batch for {missing}")
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if a.vtrain is None:
        a.vtrain = str(Path(a.vtrain_build) / "vtrain")
        if not Path(a.vtrain).is_absolute() and not Path(a.vtrain).exists():
            a.vtrain = str(ROOT / a.vtrain)
    return a


# ----------------------------------------------------------------------------- data

def data_vocab(data: Path) -> int:
    return int(json.loads((data / "meta.json").read_text())["tokenizer"]["vocab_size"])


def prepare_data(a, work: Path) -> tuple[Path | None, str | None]:
    """Returns (data dir, error)."""
    if a.data:
        d = Path(a.data)
        if not (d / "meta.json").exists():
            return None, f"--data {d}: no meta.json (make it with `vtrain prepare`)"
        return d, None
    import synthetic_data as sd
    n = a.warmup + a.steps
    need = max((n + 1) * a.batch[p] * a.seq_len for p in a.presets) + 1
    val = max(a.batch[p] * a.seq_len for p in a.presets) * 2 + 1
    if not Path(a.vtrain).is_file():
        return None, f"vtrain binary {a.vtrain} not found (needed to prepare synthetic data)"
    try:
        d = sd.make_data_dir(a.vtrain, work / "data", a.synthetic_vocab, need, val,
                             kind="uniform", seed=a.seed)
    except Exception as e:  # noqa: BLE001
        return None, f"synthetic data: {e}"
    return d, None


# ----------------------------------------------------------------------------- vtrain side

ERROR_RE = re.compile(r"error|fail|out of memory|exception|abort|killed|signal", re.I)


def error_summary(text: str, limit: int = 600) -> str:
    """The lines that say what went wrong (else the last ones), for one table footnote."""
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    picked = [l for l in lines if ERROR_RE.search(l) and not l.startswith("[")][:3] or lines[-3:]
    return " | ".join(picked)[:limit]


def run_vtrain(a, data: Path, preset: str, mode: str, work: Path) -> dict:
    B, T = a.batch[preset], a.seq_len
    n = a.warmup + a.steps
    metrics = work / f"vtrain_{preset}_{mode}.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [a.vtrain, "train", "--data", str(data), "--preset", preset, "--value", mode,
           "--seq-len", str(T), "--micro-batch", str(B), "--global-batch", str(B * T),
           "--steps", str(n), "--eval-every", "0", "--eval-tokens", str(B * T),
           "--metrics", str(metrics), "--log-every", str(max(1, n // 4)), "--seed", str(a.seed)]
    if a.vtrain_device != "none":
        cmd += ["--device", a.vtrain_device]
    cmd += shlex.split(a.vtrain_extra_args)
    env = dict(os.environ)
    for kv in a.vtrain_env:
        k, _, v = kv.partition("=")
        env[k] = v
    out = dict(cmd=" ".join(shlex.quote(c) for c in cmd))
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        out["error"] = f"timed out after {a.timeout}s"
        return out
    except OSError as e:
        out["error"] = f"cannot run {a.vtrain}: {e}"
        return out
    out["wall_s"] = time.time() - t0
    (work / f"vtrain_{preset}_{mode}.log").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    recs = []
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    train = [x for x in recs if "tok_per_s" in x and "step" in x]
    m = MODEL_RE.search(r.stdout)
    if m:
        out["params_m"] = float(m.group(7))
    mem = re.search(r"^memory estimate.*$", r.stdout, re.M)
    if mem:
        out["memory_estimate"] = mem.group(0)
    if r.returncode != 0:
        out["error"] = f"exit {r.returncode}: {error_summary(r.stdout + chr(10) + r.stderr)}"
        if len(train) <= a.warmup:  # nothing to time
            return out
    timed = [x["tok_per_s"] for x in train if x["step"] > a.warmup]
    if not timed:
        out.setdefault("error", f"no timed steps in {metrics.name} ({len(train)} step records)")
        return out
    out["tok_s"] = statistics.median(timed)
    out["tok_s_min"], out["tok_s_max"] = min(timed), max(timed)
    out["timed_steps"] = len(timed)
    losses = [x["loss"] for x in train if "loss" in x]
    if losses:
        out["loss"] = losses[-1]
    field = next((f for f in PEAK_FIELDS if any(f in x for x in train)), None)
    if field:
        peak = max(float(x.get(field, 0) or 0) for x in train)
        if peak > 0:  # vtrain logs 0 when no device backend is in use (CPU runs)
            out["peak_bytes"] = peak
            out["peak_field"] = field
    return out


# ----------------------------------------------------------------------------- PyTorch side

def torch_worker(spec: dict) -> dict:
    """Runs in its own process: builds the model, trains warmup+steps steps, returns numbers."""
    import numpy as np
    import torch

    import synthetic_data as sd
    import torch_model as tm

    dev = torch.device(spec["device"])
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    torch.manual_seed(spec["seed"])
    torch.set_float32_matmul_precision("high")
    B, T, n, warm = spec["batch"], spec["seq_len"], spec["warmup"] + spec["steps"], spec["warmup"]
    cfg = tm.Config.preset(spec["preset"], vocab_size=spec["vocab"], seq_len=T,
                           value_mode=spec["mode"])
    attn = spec["attn"]
    if attn == "auto":
        attn = "flex" if tm.flex_attention_available() and spec["compile"] else "sdpa"
    model = tm.GPT(cfg, attn_impl=attn, device=dev, dtype=torch.float32)
    model.check_param_names()
    model.init_weights(spec["seed"])
    ns_dtype = torch.bfloat16 if spec["ns_dtype"] == "bf16" else None
    opt = tm.Optimizer(model, tm.Hyper(), ns_dtype=ns_dtype, compile_ns=spec["compile"])
    fwd = model
    if spec["compile"]:
        fwd = torch.compile(model, dynamic=False, mode=None if spec["compile_mode"] == "default"
                            else spec["compile_mode"])
    if spec.get("data"):
        shard = sorted(Path(spec["data"]).glob("train_*.bin"))[0]
        toks = sd.read_shard(shard, count=min(n * B * T + 1, sd.shard_num_tokens(shard)))
        if len(toks) < n * B * T + 1:
            toks = np.resize(toks, n * B * T + 1)  # wrap around a small shard
    else:
        toks = np.random.default_rng(spec["seed"]).integers(0, cfg.vocab_size, n * B * T + 1)
    toks = torch.from_numpy(toks.astype(np.int64))
    if cuda:
        toks = toks.pin_memory()
        torch.cuda.reset_peak_memory_stats(dev)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    times, losses = [], []
    for s in range(n):
        t0 = time.perf_counter()
        chunk = toks[s * B * T: (s + 1) * B * T + 1]
        x = chunk[:-1].view(B, T).to(dev, non_blocking=True)
        y = chunk[1:].view(B, T).to(dev, non_blocking=True)
        with amp:
            loss = fwd(x, y)
        loss.backward()
        gnorm = opt.grad_norm()  # vtrain measures the global grad norm every step too
        opt.step(s, n, grad_norm=gnorm)
        opt.zero_grad()
        if cuda:
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    losses = [float(x) for x in losses]
    timed = times[warm:]
    res = dict(tok_s=B * T / statistics.median(timed), tok_s_min=B * T / max(timed),
               tok_s_max=B * T / min(timed), first_step_s=times[0], loss=losses[-1],
               attn=attn, compiled=bool(spec["compile"]), params=tm.num_params(model),
               torch=torch.__version__,
               timed_steps=len(timed))
    if not all(np.isfinite(losses)):
        res["error"] = f"loss became {losses}"
    if cuda:
        res["peak_bytes"] = float(torch.cuda.max_memory_allocated(dev))
        res["reserved_bytes"] = float(torch.cuda.max_memory_reserved(dev))
        res["gpu"] = torch.cuda.get_device_name(dev)
    return res


def run_torch(a, data: Path | None, vocab: int, preset: str, mode: str) -> dict:
    spec = dict(preset=preset, mode=mode, batch=a.batch[preset], seq_len=a.seq_len,
                warmup=a.warmup, steps=a.steps, seed=a.seed, device=a.torch_device,
                attn=a.torch_attn, compile=not a.no_torch_compile,
                compile_mode=a.torch_compile_mode, ns_dtype=a.torch_ns_dtype,
                data=str(data) if data else None, vocab=vocab)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_torch-worker", json.dumps(spec)]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {a.timeout}s")
    lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        return dict(error=f"exit {r.returncode}: {error_summary(r.stdout + chr(10) + r.stderr)}")
    res = json.loads(lines[-1][len("RESULT "):])
    res["wall_s"] = time.time() - t0
    return res


# ----------------------------------------------------------------------------- report

def fmt_rate(x):
    return "n/a" if x is None else f"{x:,.0f}"


def fmt_gib(x):
    return "n/a" if x is None else f"{x / 2**30:.1f} GiB"


def fmt_pct(x):
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if x >= 1e-3 else f"{100 * x:.2g}%"


def main(argv) -> int:
    a = parse_args(argv)
    if a.torch_worker is not None:
        try:
            res = torch_worker(json.loads(a.torch_worker))
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}".splitlines()
            res = dict(error=" ".join(msg)[:600], traceback=traceback.format_exc()[-3000:])
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    import torch_model as tm

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="vtrain-gpubench-"))
    work.mkdir(parents=True, exist_ok=True)
    data, data_err = prepare_data(a, work)
    vocab = data_vocab(data) if data else a.synthetic_vocab
    if data_err:
        print(f"warning: {data_err}; the vtrain side cannot run", file=sys.stderr)
    print(f"vtrain: {a.vtrain} (--device {a.vtrain_device}{', extra: ' + a.vtrain_extra_args if a.vtrain_extra_args else ''}); "
          f"data: {data if data else 'none'} (vocab {vocab}); work files: {work}", flush=True)
    results = []
    for preset in a.presets:
        for mode in a.modes:
            row = dict(preset=preset, mode=mode, batch=a.batch[preset], seq_len=a.seq_len)
            try:
                cfg = tm.Config.preset(preset, vocab_size=vocab, seq_len=a.seq_len, value_mode=mode)
                row["flops_per_token"] = cfg.flops_per_token()
                row["params"] = sum(int(__import__("math").prod(s))
                                    for s in cfg.param_shapes().values())
            except Exception as e:  # noqa: BLE001
                row["vtrain"] = row["torch"] = dict(error=f"config: {e}")
                results.append(row)
                continue
            if a.only in ("both", "vtrain"):
                row["vtrain"] = (run_vtrain(a, data, preset, mode, work) if data
                                 else dict(error=data_err))
            else:
                row["vtrain"] = dict(error="skipped (--only)")
            if a.only in ("both", "torch"):
                row["torch"] = run_torch(a, data, vocab, preset, mode)
            else:
                row["torch"] = dict(error="skipped (--only)")
            v, t = row["vtrain"], row["torch"]
            print(f"  {preset} {mode}: vtrain {fmt_rate(v.get('tok_s'))} tok/s"
                  f"{' (' + v['error'] + ')' if 'error' in v else ''}; torch "
                  f"{fmt_rate(t.get('tok_s'))} tok/s"
                  f"{' (' + t['error'] + ')' if 'error' in t else ''}", flush=True)
            results.append(row)

    gpu = next((r["torch"].get("gpu") for r in results if r["torch"].get("gpu")), None)
    tv = next((r["torch"].get("torch") for r in results if r["torch"].get("torch")), None)
    print(f"\nGPU: {gpu or 'unknown'}; torch {tv or '?'}; T={a.seq_len}; median of {a.steps} "
          f"steps after {a.warmup} warm-up; MFU vs {a.peak_tflops:g} TFLOP/s bf16 dense\n")
    print("| preset | mode | tokens/step | vtrain tok/s | torch tok/s | vtrain/torch | vtrain MFU | "
          "torch MFU | vtrain peak mem | torch peak mem (reserved) | loss vtrain | loss torch |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    peak = a.peak_tflops * 1e12
    for r in results:
        v, t = r["vtrain"], r["torch"]
        fpt = r.get("flops_per_token")
        vt, tt = v.get("tok_s"), t.get("tok_s")
        ratio = vt / tt if vt and tt else None
        r["ratio"] = ratio
        vm = vt * fpt / peak if vt and fpt else None
        tmfu = tt * fpt / peak if tt and fpt else None
        r["vtrain_mfu"], r["torch_mfu"] = vm, tmfu
        tmem = fmt_gib(t.get("peak_bytes"))
        if t.get("reserved_bytes"):
            tmem += f" ({t['reserved_bytes'] / 2**30:.1f})"
        lv = f"{v['loss']:.3f}" if "loss" in v else "n/a"
        lt = f"{t['loss']:.3f}" if "loss" in t else "n/a"
        print(f"| {r['preset']} | {r['mode']} | {r['batch']}x{r['seq_len']} | "
              f"{fmt_rate(vt) if vt else 'FAILED'} | {fmt_rate(tt) if tt else 'FAILED'} | "
              f"{'n/a' if ratio is None else f'{ratio:.2f}'} | {fmt_pct(vm)} | {fmt_pct(tmfu)} | "
              f"{fmt_gib(v.get('peak_bytes'))} | {tmem} | {lv} | {lt} |")
    print("\nratio > 1: vtrain is faster. MFU uses vtrain's FLOPs/token (6 x matmul params seen "
          "per token + attention over the windows; table lookups and Newton-Schulz not counted).")
    for r in results:
        for side in ("vtrain", "torch"):
            x = r[side]
            if "error" in x and x["error"] != "skipped (--only)":
                print(f"  {r['preset']} {r['mode']} {side}: ERROR {x['error']}")
                if "cmd" in x:
                    print(f"    command: {x['cmd']}")
        t = r["torch"]
        if "tok_s" in t:
            print(f"  {r['preset']} {r['mode']}: torch attention {t.get('attn')}, "
                  f"{'compiled' if t.get('compiled') else 'eager'}, first step "
                  f"{t.get('first_step_s', 0):.1f}s, steps {fmt_rate(t['tok_s_min'])}.."
                  f"{fmt_rate(t['tok_s_max'])} tok/s; vtrain steps "
                  f"{fmt_rate(r['vtrain'].get('tok_s_min'))}..{fmt_rate(r['vtrain'].get('tok_s_max'))}"
                  f"{'; vtrain peak from ' + r['vtrain']['peak_field'] if r['vtrain'].get('peak_field') else ''}")
        if r["vtrain"].get("memory_estimate"):
            print(f"  {r['preset']} {r['mode']}: vtrain {r['vtrain']['memory_estimate']}")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(args={k: v for k, v in vars(a).items()
                                                      if k != "torch_worker"},
                                                results=results), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
