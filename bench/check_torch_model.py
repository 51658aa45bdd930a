#!/usr/bin/env python3
# bench/check_torch_model.py owns the CPU correctness check of the PyTorch peer
# (bench/torch_model.py): it must compute what vtrain computes before its speed means anything.
"""Check bench/torch_model.py against vtrain (through checkpoints) and the JAX reference.

    python bench/check_torch_model.py [--vtrain build/vtrain] [--modes baseline,bov]
                                      [--steps 6] [--vocab 4000] [--jax-python .venv/bin/python]

Part A (needs a python with jax, --jax-python; skipped when there is none): for every value mode
tests/reference/make_case.py writes a case (random float32 parameters, GQA 4/2 heads, vocabulary
251 padded to 256, T 32, window 8) with the reference's float64 loss and gradients; the torch
model in float64 must reproduce the loss to 1e-12 and every gradient to 1e-6 of the model's
gradient scale (the case stores float32 gradients), with attn_impl math and sdpa (flex:
forward only, PyTorch has no flex backward on the CPU).

Part B (needs the vtrain binary): for each --modes value mode, `vtrain train --preset tiny`
(vocabulary --vocab from a synthetic tiktoken tokenizer, Markov-chain tokens, --warmup 0
--lr-scale 4 so the weights move far from their init) runs K+1 = --steps + 1 steps saving a checkpoint after every step.
Step k+1's logged loss and grad_norm are computed by vtrain on the weights of checkpoint k and
the batch at the checkpoint's loader offset. For k = 1..K the torch model (float64, math
attention) loads checkpoint k with its optimizer states and must reproduce
  * the loss (relative error <= 1e-5; vtrain computes in float32),
  * the global grad norm (relative error <= 1e-4),
  * the update: one torch Optimizer.step from checkpoint k (schedule step k of K+1) must give
    checkpoint k+1 to 1e-3 of the step vtrain actually took, per parameter, in the Frobenius
    norm ||p_torch - p_vt(k+1)|| / ||p_vt(k+1) - p_vt(k)||, and for Muon matrices also
    elementwise (max |.| over max |.|). AdamW parameters are not held to the elementwise
    bound: an element whose first non-zero gradient is ~1e-11 moves by lr * g/(|g| + eps)
    with eps = 1e-10, which vtrain's float32 gradient cannot pin down.
Part C (after each mode of part B): on checkpoint K, the benchmark's precision setup (fp32
parameters, bf16 autocast, bf16 Newton-Schulz; eager, sdpa) against float64: loss within 2e-2
relative, Muon updates (with fp32 and with bf16 Newton-Schulz) within 0.2 (Frobenius): a bound
for gross dtype or layout mistakes only (bf16 Newton-Schulz itself differs by ~5-8% here).
Step 1 (the initial weights) is not compared: vtrain saves no step-0 checkpoint and its random
streams are not ported.
Exit status 0 when every comparison passes.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import warnings

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

# flex_attention without torch.compile warns once per call site; eager flex is what is checked.
warnings.filterwarnings("ignore", module=r"torch\.nn\.attention\.flex_attention")

import synthetic_data as sd  # noqa: E402
import torch_model as tm  # noqa: E402

CASE_MODES = [("baseline", []), ("bov", []), ("bov", ["--shared-table"]), ("x0v", []),
              ("v1", []), ("svformer", []), ("resformer-identity", []),
              ("resformer-constant", []), ("resformer-sparse", []),
              ("resformer-learnable", ["--detach-v1"]), ("resformer-plus", []),
              ("resformer-dense", []), ("bov-add", []), ("bov-add", ["--bov-add-fixed"]),
              ("value-embed", [])]

LOSS_RTOL_VT = 1e-5
GNORM_RTOL_VT = 1e-4
UPDATE_RTOL_VT = 1e-3


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
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vtrain", default=None, help="vtrain binary ($VTRAIN_BUILD/vtrain or build/vtrain)")
    p.add_argument("--modes", default="baseline,bov", help="value modes of part B (baseline,bov)")
    p.add_argument("--steps", type=int, default=6, help="K: checkpoints compared (6)")
    p.add_argument("--vocab", type=int, default=4000,
                   help="vocabulary of the synthetic tokenizer (4000, padded to 4032: exercises "
                        "the padding)")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--lr-scale", type=float, default=4.0,
                   help="vtrain --lr-scale (4: the weights, W_O and W_proj in particular, move "
                        "far enough from init in K steps that attention changes the loss by "
                        "~0.4 nats; printed as |dL| W_O=0)")
    p.add_argument("--jax-python", default=None,
                   help="python with jax for part A (default: .venv/bin/python of the repo if "
                        "it has jax); 'none' skips part A")
    p.add_argument("--vtrain-extra-args", default="",
                   help="extra `vtrain train` flags of part B, one shell-quoted string, e.g. "
                        "'--device emulated --act-dtype f32' (the GPU code path on the CPU)")
    p.add_argument("--rtol-scale", type=float, default=1.0,
                   help="multiply part B's tolerances (e.g. 1000 with --act-dtype bf16)")
    p.add_argument("--skip-vtrain", action="store_true", help="part A only")
    p.add_argument("--keep", default=None, help="keep the work files in this directory")
    a = p.parse_args(_join_flag_values(list(argv), ("--vtrain-extra-args",)))
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if a.vtrain is None:
        b = os.environ.get("VTRAIN_BUILD")
        a.vtrain = str(Path(b) / "vtrain" if b else ROOT / "build" / "vtrain")
    return a


# ------------------------------------------------------------------------ part A: JAX reference

def find_jax_python(a):
    if a.jax_python == "none":
        return None
    cands = [a.jax_python] if a.jax_python else [str(ROOT / ".venv" / "bin" / "python")]
    for c in cands:
        if c and Path(c).exists() and subprocess.run(
                [c, "-c", "import jax, h5py"], capture_output=True).returncode == 0:
            return c
    return None


def part_a(a, work: Path) -> bool:
    py = find_jax_python(a)
    if py is None:
        print("part A (JAX reference cases): skipped, no python with jax (--jax-python)")
        return True
    import h5py
    print(f"part A: torch float64 vs the JAX float64 reference (tests/reference), {py}")
    ok = True
    cases = work / "cases"
    cases.mkdir(exist_ok=True)
    for mode, flags in CASE_MODES:
        tag = mode + "".join(flags).replace("--", "+")
        path = cases / f"{tag}.h5"
        r = subprocess.run([py, str(ROOT / "tests" / "reference" / "make_case.py"), "--mode", mode,
                            "--out", str(path), "--batch", "2", *flags],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  {tag}: make_case failed: {r.stderr[-500:]}")
            ok = False
            continue
        with h5py.File(path, "r") as f:
            raw = f.attrs["config"]
            j = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
            if "value_plus.scale" in f["params"] and not j.get("plus_scale"):
                # make_case.py's configs leave plus_scale out, which the JAX reference reads as
                # learnable (a vtrain checkpoint without it reads as fixed: docs/model.md).
                j["plus_scale"] = "learnable"
            cfg = tm.Config.from_vtrain_json(j)
            inp = torch.from_numpy(f["inputs"][...].astype(np.int64))
            tgt = torch.from_numpy(f["targets"][...].astype(np.int64))
            params = {k: f["params"][k][...] for k in f["params"]}
            grads = {k: f["grads"][k][...].astype(np.float64) for k in f["grads"]}
            loss_ref = float(f["loss"][...])
        gmax = max(float(np.abs(g).max()) for g in grads.values())
        line, row_ok = [], True
        for impl in ("math", "sdpa", "flex"):
            model = tm.GPT(cfg, attn_impl=impl, dtype=torch.float64)
            model.check_param_names()
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(torch.from_numpy(params[n]).double())
            if impl == "flex":
                with torch.no_grad():
                    loss = model(inp, tgt).item()
                lrel = abs(loss - loss_ref) / abs(loss_ref)
                good = lrel <= 1e-12
                line.append(f"{impl} loss {lrel:.1e}")
            else:
                out = model(inp, tgt)
                out.backward()
                lrel = abs(out.item() - loss_ref) / abs(loss_ref)
                worst, wname = 0.0, ""
                for n, p in model.named_parameters():
                    g = grads[n]
                    e = float(np.abs(p.grad.numpy() - g).max()) / max(float(np.abs(g).max()),
                                                                        1e-2 * gmax)
                    if e > worst:
                        worst, wname = e, n
                good = lrel <= 1e-12 and worst <= 1e-6
                line.append(f"{impl} loss {lrel:.1e} grad {worst:.1e}")
            row_ok &= good
        ok &= row_ok
        print(f"  {'ok  ' if row_ok else 'FAIL'} {tag:34s} loss {loss_ref:.6f} | " + " | ".join(line))
    return ok


# ------------------------------------------------------------------------ part B: vtrain

def run_vtrain(a, data: Path, mode: str, run: Path) -> dict:
    K = a.steps
    ck = run / "ckpt"
    metrics = run / "metrics.jsonl"
    metrics.unlink(missing_ok=True)  # vtrain never truncates a metrics file on a fresh run
    T = 256
    cmd = [a.vtrain, "train", "--data", str(data), "--preset", "tiny", "--value", mode,
           "--micro-batch", str(a.micro_batch), "--global-batch", str(a.micro_batch * T),
           "--steps", str(K + 1), "--warmup", "0", "--lr-scale", str(a.lr_scale),
           "--ckpt-dir", str(ck), "--ckpt-every", "1", "--keep-last", "0",
           "--eval-tokens", str(a.micro_batch * T), "--metrics", str(metrics),
           "--log-every", str(K + 1), "--seed", "7", *shlex.split(a.vtrain_extra_args)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"vtrain failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}"
                           f"\n{r.stderr[-2000:]}")
    recs = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()]
    train = {x["step"]: x for x in recs if "loss" in x}
    return dict(ckpt=ck, train=train, stdout=r.stdout)


def batch_at(data: Path, offset: int, B: int, T: int):
    toks = sd.read_shard(data / "train_000000.bin", count=B * T + 1, offset=offset)
    x = torch.from_numpy(toks[:-1].reshape(B, T).copy())
    y = torch.from_numpy(toks[1:].reshape(B, T).copy())
    return x, y


def part_b(a, work: Path) -> bool:
    if not Path(a.vtrain).is_file():
        print(f"part B: vtrain binary {a.vtrain} not found (build it or pass --vtrain)")
        return False
    B, T, K = a.micro_batch, 256, a.steps
    data = sd.make_data_dir(a.vtrain, work / "data", a.vocab, (K + 2) * B * T + 1, 4 * B * T + 1,
                            kind="markov", seed=3)
    print(f"part B: torch float64 vs vtrain ({a.vtrain}), preset tiny, vocab {a.vocab}, "
          f"B={B} T={T}, {K + 1} steps with --warmup 0 --lr-scale {a.lr_scale} "
          f"{a.vtrain_extra_args}")
    ok = True
    for mode in a.modes:
        t0 = time.time()
        run = work / f"run_{mode}"
        run.mkdir(exist_ok=True)
        try:
            vt = run_vtrain(a, data, mode, run)
        except RuntimeError as e:
            print(f"  FAIL {mode}: {e}")
            ok = False
            continue
        print(f"  {mode}: vtrain ran {K + 1} steps in {time.time() - t0:.1f}s; step losses "
              + ", ".join(f"{vt['train'][s]['loss']:.4f}" for s in sorted(vt["train"])))
        rows = []
        for k in range(1, K + 1):
            path_k = vt["ckpt"] / f"step_{k:08d}.h5"
            path_n = vt["ckpt"] / f"step_{k + 1:08d}.h5"
            import h5py
            with h5py.File(path_k, "r") as f:
                raw = f.attrs["config"]
                meta_cfg = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
            cfg = tm.Config.from_vtrain_json(meta_cfg)
            model = tm.GPT(cfg, attn_impl="math", dtype=torch.float64)
            model.check_param_names()
            meta = model.load_vtrain_checkpoint(str(path_k))
            opt = tm.Optimizer(model, tm.Hyper.from_vtrain_extra(meta["extra"]))
            model.load_vtrain_checkpoint(str(path_k), optimizer=opt)
            assert meta["step"] == k, meta["step"]
            offset = int(meta["loader_state"]["offset"])
            if offset != k * B * T or meta["loader_state"]["epoch"] != 0:
                raise RuntimeError(f"unexpected loader state {meta['loader_state']}")
            x, y = batch_at(data, offset, B, T)
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            loss = model(x, y)
            loss.backward()
            gnorm = float(opt.grad_norm())
            opt.step(k, int(meta["extra"]["steps"]))
            with h5py.File(path_n, "r") as f:
                after = {n: f["model"][n][...].astype(np.float64) for n in before}
            worst, wname, worst_max, mname = 0.0, "", 0.0, ""
            for n, p in model.named_parameters():
                # Error of the update relative to the step vtrain actually took: Frobenius
                # (every parameter) and max-element (Muon matrices only: an AdamW element whose
                # first gradient is ~1e-11 has an update g/(|g| + eps) set by fp32 round-off).
                d_vt = after[n] - before[n].numpy()
                d_err = p.detach().numpy() - after[n]
                fro = float(np.linalg.norm(d_err)) / max(float(np.linalg.norm(d_vt)), 1e-30)
                if fro > worst:
                    worst, wname = fro, n
                if tm.param_group(n) == "matrix":
                    mx = float(np.abs(d_err).max()) / max(float(np.abs(d_vt).max()), 1e-30)
                    if mx > worst_max:
                        worst_max, mname = mx, n
            # Sensitivity: the loss on checkpoint k with every W_O zeroed (attention switched
            # off) shows how much of the loss agreement is about attention.
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(before[n])
                    if n.endswith("attn.wo"):
                        p.zero_()
                loss_no_attn = float(model(x, y))
            lv, gv = vt["train"][k + 1]["loss"], vt["train"][k + 1]["grad_norm"]
            lrel = abs(loss.item() - lv) / abs(lv)
            grel = abs(gnorm - gv) / abs(gv)
            sc = a.rtol_scale
            good = (lrel <= LOSS_RTOL_VT * sc and grel <= GNORM_RTOL_VT * sc
                    and worst <= UPDATE_RTOL_VT * sc and worst_max <= UPDATE_RTOL_VT * sc)
            ok &= good
            rows.append((k, lv, loss.item(), lrel, gv, gnorm, grel, worst, wname, worst_max,
                         mname, abs(loss_no_attn - loss.item()), good))
        print(f"  {'k':>2} {'vtrain loss':>12} {'torch loss':>12} {'rel':>8} {'vt gnorm':>10} "
              f"{'torch gnorm':>11} {'rel':>8} {'upd fro':>8} {'(param)':24s} {'upd max':>8} "
              f"{'(Muon param)':22s} {'|dL| W_O=0':>10}")
        for (k, lv, lt, lrel, gv, gt, grel, worst, wname, wmax, mname, sens, good) in rows:
            print(f"  {k:>2} {lv:12.8f} {lt:12.8f} {lrel:8.1e} {gv:10.6f} {gt:11.6f} {grel:8.1e} "
                  f"{worst:8.1e} {wname:24s} {wmax:8.1e} {mname:22s} {sens:10.4f} "
                  f"{'ok' if good else 'FAIL'}")
        ok &= part_c(a, data, vt["ckpt"] / f"step_{K:08d}.h5", B, T)
    return ok


def part_c(a, data: Path, ckpt: Path, B: int, T: int) -> bool:
    """The benchmark's mixed-precision configuration (fp32 parameters, bf16 autocast, bf16
    Newton-Schulz; eager, sdpa: flex has no CPU backward) against float64 on checkpoint K: a
    sanity bound for gross errors in the dtype handling, not an exactness test."""
    res = {}
    for tag, dtype, amp, ns in (("fp64", torch.float64, False, None),
                                ("amp+ns32", torch.float32, True, None),
                                ("amp+ns16", torch.float32, True, torch.bfloat16)):
        import h5py
        with h5py.File(ckpt, "r") as f:
            raw = f.attrs["config"]
            cfg = tm.Config.from_vtrain_json(raw.decode() if isinstance(raw, bytes) else str(raw))
        model = tm.GPT(cfg, attn_impl="sdpa", dtype=dtype)
        meta = model.load_vtrain_checkpoint(str(ckpt))
        opt = tm.Optimizer(model, tm.Hyper.from_vtrain_extra(meta["extra"]), ns_dtype=ns)
        model.load_vtrain_checkpoint(str(ckpt), optimizer=opt)
        x, y = batch_at(data, int(meta["loader_state"]["offset"]), B, T)
        before = {n: p.detach().double().clone() for n, p in model.named_parameters()}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = model(x, y)
        loss.backward()
        opt.step(meta["step"], int(meta["extra"]["steps"]))
        res[tag] = (float(loss.detach()), {n: p.detach().double() - before[n]
                                  for n, p in model.named_parameters()})
    l64, d64 = res["fp64"]
    l16 = res["amp+ns32"][0]
    lrel = abs(l16 - l64) / abs(l64)

    def worst_update(d):
        w, wn = 0.0, ""
        for n, ref in d64.items():
            if tm.param_group(n) == "matrix":
                e = float(torch.linalg.vector_norm(d[n] - ref) / torch.linalg.vector_norm(ref))
                if e > w:
                    w, wn = e, n
        return w, wn

    w32, n32 = worst_update(res["amp+ns32"][1])
    w16, n16 = worst_update(res["amp+ns16"][1])
    good = lrel <= 2e-2 and w32 <= 0.2 and w16 <= 0.2
    print(f"  part C ({ckpt.parent.parent.name}, {ckpt.stem}) vs float64: bf16-autocast loss "
          f"{l16:.6f} vs {l64:.6f} (rel {lrel:.1e}, bound 2e-2); Muon update, worst "
          f"matrix, Frobenius: autocast grads + fp32 Newton-Schulz {w32:.1e} ({n32}), + bf16 "
          f"Newton-Schulz {w16:.1e} ({n16}) (bound 0.2: quintic NS amplifies small singular "
          f"values ~3.4x per iteration) {'ok' if good else 'FAIL'}")
    return good


def main(argv) -> int:
    a = parse_args(argv)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="vtrain-torchcheck-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        ok = part_a(a, tmp)
        if not a.skip_vtrain:
            ok &= part_b(a, tmp)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
