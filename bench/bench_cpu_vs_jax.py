#!/usr/bin/env python3
# bench/bench_cpu_vs_jax.py owns the CPU training-throughput benchmark of vtrain against a JAX
# peer (bench/jax_model.py, jit on CPU): same model shapes, same optimizers, same machine, one run.
# It prints tokens/s of each side and the ratio vtrain / jax; it never asserts on speed.
"""Time a full training step (forward, backward, optimizer) in vtrain's CPU backend and in JAX.

    python bench/bench_cpu_vs_jax.py --data DATADIR [--modes baseline,bov] [--steps 30]
    python bench/bench_cpu_vs_jax.py --input corpus.txt --tokenizer bpe:4096   # prepares first

vtrain side: `vtrain train` for --steps steps with --metrics; tok/s is the median of the per-step
tok_per_s after --warmup steps. JAX side: the same shapes in bench/jax_model.py, one jitted step,
compiled first, then --warmup untimed steps, then --steps steps each timed with
block_until_ready; tok/s = B*T / median step time. See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# What `vtrain train` prints about the model it built; the JAX side copies these shapes.
MODEL_RE = re.compile(r"model: (\d+) layers, d=(\d+), (\d+) heads \((\d+) kv\), T=(\d+), "
                      r"vocab (\d+) \| ([\d.]+)M params")
PRESETS = {"tiny": dict(n_layer=4, n_embd=128, n_head=4, n_kv_head=4, head_dim=32, seq_len=256)}


class BenchError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(description="vtrain CPU vs JAX (jit, CPU) training-step throughput")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="data directory made by `vtrain prepare`")
    src.add_argument("--input", help="text file to prepare first (into a temporary directory)")
    p.add_argument("--tokenizer", default="bpe:4096", help="with --input: tokenizer spec (bpe:4096)")
    p.add_argument("--modes", default="baseline,bov",
                   help="value modes, comma-separated (JAX peer has baseline, resformer-identity, "
                        "svformer, v1, x0v, bov)")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    for flag in ("layers", "dim", "heads", "kv-heads", "seq-len", "window"):
        p.add_argument(f"--{flag}", type=int, help="model override, passed to both sides")
    p.add_argument("--micro-batch", type=int, default=8, help="rows of T tokens per step (8)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per side and mode (30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (5)")
    p.add_argument("--repeats", type=int, default=2,
                   help="measure each side R times, alternating, and keep the best median: "
                        "on a shared machine the least disturbed run is the closest to the truth (2)")
    p.add_argument("--threads", type=int, default=None,
                   help="pin both sides to N threads: vtrain OMP_NUM_THREADS=N "
                        "OPENBLAS_NUM_THREADS=1, JAX (N=1 only) single-threaded Eigen; "
                        "default: leave both as they start")
    p.add_argument("--vtrain-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for the vtrain runs (repeatable)")
    p.add_argument("--vtrain", default=None, help="vtrain binary ($VTRAIN_BUILD/vtrain or build/vtrain)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    p.add_argument("--sgemm", action="store_true",
                   help="also time every matrix product of a baseline step with numpy's SGEMM "
                        "(bench/sgemm_bound.py) and print each side's tok/s against that floor")
    a = p.parse_args(argv)
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    if a.steps < 3 or a.warmup < 0 or a.repeats < 1:
        p.error("--steps must be >= 3, --warmup >= 0, --repeats >= 1")
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if a.vtrain is None:
        b = os.environ.get("VTRAIN_BUILD")
        a.vtrain = str(Path(b) / "vtrain" if b else ROOT / "build" / "vtrain")
    return a


def model_flags(a) -> list[str]:
    out = ["--preset", a.preset]
    for flag in ("layers", "dim", "heads", "kv-heads", "seq-len", "window"):
        v = getattr(a, flag.replace("-", "_"))
        if v is not None:
            out += [f"--{flag}", str(v)]
    return out


def vtrain_env(a) -> dict:
    env = dict(os.environ)
    if a.threads is not None:
        env["OMP_NUM_THREADS"] = str(a.threads)
        env["OPENBLAS_NUM_THREADS"] = "1"
    for kv in a.vtrain_env:
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def run_vtrain(a, data: str, mode: str, work: Path) -> dict:
    """Trains warmup+steps steps; returns shapes, median tok/s after warm-up and the last loss."""
    T = a.seq_len or PRESETS[a.preset]["seq_len"]
    metrics = work / f"vtrain_{mode}.jsonl"
    metrics.unlink(missing_ok=True)  # vtrain never truncates a metrics file on a fresh run
    n = a.warmup + a.steps
    cmd = [a.vtrain, "train", "--data", data, "--value", mode, *model_flags(a),
           "--micro-batch", str(a.micro_batch), "--global-batch", str(a.micro_batch * T),
           "--steps", str(n), "--eval-every", "0", "--eval-tokens", str(a.micro_batch * T),
           "--metrics", str(metrics), "--seed", str(a.seed), "--log-every", str(n)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=vtrain_env(a))
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-20:])
        raise BenchError(f"vtrain failed (exit {r.returncode}): {' '.join(cmd)}\n{tail}")
    m = MODEL_RE.search(r.stdout)
    if not m:
        raise BenchError(f"cannot find the model line in vtrain's output:\n{r.stdout[:2000]}")
    L, d, H, Hkv, T, V = map(int, m.groups()[:6])
    recs = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()]
    train = [x for x in recs if "tok_per_s" in x]
    timed = [x["tok_per_s"] for x in train if x["step"] > a.warmup]
    return dict(shapes=dict(n_layer=L, n_embd=d, n_head=H, n_kv_head=Hkv, head_dim=d // H,
                            seq_len=T, vocab_size=V),
                params_m=float(m.group(7)), tok_s=statistics.median(timed),
                tok_s_min=min(timed), tok_s_max=max(timed),
                loss=float(np.mean([x["loss"] for x in train[-10:]])),
                wall=time.time() - t0)


def read_tokens(data: str, n: int) -> np.ndarray:
    """First n tokens of the first train shard (llm.c format: 256 int32 header, then tokens)."""
    shards = sorted(Path(data).glob("train_*.bin"))
    if not shards:
        raise BenchError(f"{data} has no train_*.bin shard")
    header = np.fromfile(shards[0], dtype=np.int32, count=256)
    dtype = {20240520: np.uint16, 20240801: np.uint32}.get(int(header[0]))
    if dtype is None:
        raise BenchError(f"{shards[0]}: unknown shard magic {header[0]}")
    count = int(header[2])
    toks = np.fromfile(shards[0], dtype=dtype, count=min(n, count), offset=256 * 4)
    if len(toks) < n:
        toks = np.resize(toks, n)  # wrap around a small shard
    return toks.astype(np.int32)


_JAX_CACHE: dict = {}


def run_jax(a, data: str, mode: str, shapes: dict) -> dict:
    """Fresh parameters and optimizer state each call; the jitted step is compiled once per mode."""
    import jax
    import jax_model as jm

    cfg = jm.Config(value_mode=mode, short_window=a.window or 0, **shapes)
    B, T = a.micro_batch, cfg.seq_len
    n = a.warmup + a.steps
    toks = read_tokens(data, (n + 1) * B * T + 1)
    params = jm.init_params(cfg, a.seed)
    nparams = jm.num_params(params)
    state = jm.init_opt_state(params)
    first = cfg not in _JAX_CACHE
    if first:
        _JAX_CACHE[cfg] = [jm.make_train_step(cfg), 0.0]
    step = _JAX_CACHE[cfg][0]
    losses, times = [], []
    for s in range(n + 1):  # step 0 compiles (first call for this mode) and is never timed
        rows = toks[s * B * T:(s + 1) * B * T + 1]
        ids = rows[:-1].reshape(B, T)
        tgt = rows[1:].reshape(B, T)
        t0 = time.perf_counter()
        params, state, loss, gnorm = step(params, state, ids, tgt, jm.lr_multiplier(s, n + 1),
                                          jm.muon_momentum(s), float(s + 1))
        loss.block_until_ready()
        dt = time.perf_counter() - t0
        if s == 0 and first:
            _JAX_CACHE[cfg][1] = dt
        elif s > a.warmup:
            times.append(dt)
        losses.append(float(loss))
    if not np.isfinite(losses[-1]):
        raise BenchError(f"JAX {mode}: loss became {losses[-1]}")
    rates = [B * T / t for t in times]
    return dict(params=nparams, tok_s=B * T / statistics.median(times), tok_s_min=min(rates),
                tok_s_max=max(rates), loss=float(np.mean(losses[-10:])),
                compile_s=_JAX_CACHE[cfg][1], flops_per_token=cfg.flops_per_token())


def best(runs: list[dict]) -> dict:
    """The repeat with the highest median tok/s, annotated with every repeat's median."""
    b = dict(max(runs, key=lambda r: r["tok_s"]))
    b["medians"] = [r["tok_s"] for r in runs]
    return b


def sgemm_floor(a, results: list[dict]) -> None:
    """bench/sgemm_bound.py on the baseline shapes, with vtrain's thread count, in a subprocess
    (numpy's BLAS reads its thread count when it loads)."""
    s = results[0]["vtrain"]["shapes"]
    threads = a.threads or os.cpu_count()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, str(HERE / "sgemm_bound.py"), "--layers", str(s["n_layer"]),
               "--dim", str(s["n_embd"]), "--heads", str(s["n_head"]),
               "--kv-heads", str(s["n_kv_head"]), "--head-dim", str(s["head_dim"]),
               "--seq-len", str(s["seq_len"]), "--micro-batch", str(a.micro_batch),
               "--vocab", str(s["vocab_size"]), "--threads", str(threads), "--json", f.name]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"sgemm_bound.py failed:\n{r.stderr[-2000:]}")
        floor = json.loads(Path(f.name).read_text())
    print(f"\n{r.stdout.strip()} (numpy {np.__version__}, {threads} thread(s))")
    for res in results:
        note = "" if res["mode"] == "baseline" else " (baseline's GEMMs)"
        res["sgemm_floor"] = floor
        print(f"  {res['mode']}: vtrain at {res['vtrain']['tok_s'] / floor['tok_s']:.0%} of the "
              f"SGEMM floor's tok/s, jax at {res['jax']['tok_s'] / floor['tok_s']:.0%}{note}")


def main(argv) -> int:
    a = parse_args(argv)
    if a.threads == 1:  # must happen before jax is imported
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()
    elif a.threads is not None:
        print(f"note: --threads {a.threads} pins vtrain only; XLA has no simple N-thread knob, "
              "JAX keeps its default thread pool", file=sys.stderr)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    if not Path(a.vtrain).is_file():
        raise BenchError(f"vtrain binary {a.vtrain} not found; build it "
                         "(cmake --build build --target vtrain) or pass --vtrain")
    with tempfile.TemporaryDirectory(prefix="vtrain-bench-") as tmp:
        work = Path(tmp)
        data = a.data
        if data is None:
            data = str(work / "data")
            r = subprocess.run([a.vtrain, "prepare", "--input", a.input, "--out", data,
                                "--tokenizer", a.tokenizer, "--val-fraction", "0.02"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise BenchError(f"vtrain prepare failed:\n{r.stderr[-2000:]}")
        import jax
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
              f"jax {jax.__version__} on {jax.devices()[0].platform}; "
              f"threads: {'default' if a.threads is None else a.threads}"
              + (f"; vtrain env {' '.join(a.vtrain_env)}" if a.vtrain_env else ""), flush=True)
        results = []
        for mode in a.modes:
            vs, js = [], []
            for rep in range(a.repeats):
                vs.append(run_vtrain(a, data, mode, work))
                js.append(run_jax(a, data, mode, vs[-1]["shapes"]))
                print(f"  {mode} #{rep + 1}: vtrain {vs[-1]['tok_s']:,.0f} tok/s, "
                      f"jax {js[-1]['tok_s']:,.0f} tok/s (jax compile {js[-1]['compile_s']:.1f}s)",
                      flush=True)
            v, j = best(vs), best(js)
            if abs(j["params"] / 1e6 - v["params_m"]) > 0.006:
                print(f"warning: {mode}: vtrain reports {v['params_m']:.2f}M parameters, "
                      f"the JAX model has {j['params'] / 1e6:.3f}M", file=sys.stderr)
            results.append(dict(mode=mode, vtrain=v, jax=j))
        load = os.getloadavg()[0]

    s = results[0]["vtrain"]["shapes"]
    print(f"\nmodel: L{s['n_layer']} d{s['n_embd']} H{s['n_head']} (kv {s['n_kv_head']}) "
          f"hd{s['head_dim']} T{s['seq_len']} vocab {s['vocab_size']}, micro-batch "
          f"{a.micro_batch} ({a.micro_batch * s['seq_len']} tokens/step); median of {a.steps} "
          f"steps after {a.warmup} warm-up, best of {a.repeats}; load average at the end "
          f"{load:.2f}\n")
    hdr = ("| mode | params | vtrain tok/s | jax tok/s | vtrain/jax | vtrain GFLOP/s | "
           "jax GFLOP/s | loss vtrain | loss jax | jax compile s |")
    print(hdr)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        v, j = r["vtrain"], r["jax"]
        fpt = j["flops_per_token"]
        r["ratio"] = v["tok_s"] / j["tok_s"]
        print(f"| {r['mode']} | {j['params'] / 1e6:.3f}M | {v['tok_s']:,.0f} | {j['tok_s']:,.0f} | "
              f"{r['ratio']:.2f} | {v['tok_s'] * fpt / 1e9:.2f} | {j['tok_s'] * fpt / 1e9:.2f} | "
              f"{v['loss']:.3f} | {j['loss']:.3f} | {j['compile_s']:.1f} |")
    print(f"\nratio > 1: vtrain is faster. tok/s = best of {a.repeats} medians; loss = mean of "
          "the last 10 steps (a sanity check: different init draws and data order).")
    for r in results:
        med = lambda x: ", ".join(f"{m:,.0f}" for m in x["medians"])
        print(f"  {r['mode']}: vtrain medians [{med(r['vtrain'])}] (steps of the best "
              f"{r['vtrain']['tok_s_min']:,.0f}..{r['vtrain']['tok_s_max']:,.0f}); jax medians "
              f"[{med(r['jax'])}] ({r['jax']['tok_s_min']:,.0f}..{r['jax']['tok_s_max']:,.0f})")
    if a.sgemm:
        sgemm_floor(a, results)
    if a.json:
        Path(a.json).write_text(json.dumps(dict(args=vars(a), results=results), indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"bench_cpu_vs_jax.py: error: {e}", file=sys.stderr)
        sys.exit(1)
