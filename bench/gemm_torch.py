#!/usr/bin/env python3
# bench/gemm_torch.py owns the peer of tools/gemm_bench in the GPU window (scripts/device_window.sh,
# stage gemm): torch's bf16 matmul at the very shapes and transposes gemm_bench timed through
# vtrain's cuBLASLt GEMM, in the same call on the same GPU, and the ratio vtrain / torch per shape.
"""Time torch.matmul (bf16 in, bf16 out) at gemm_bench's shapes and merge the result into its JSON.

    python3 bench/gemm_torch.py GEMM_BENCH.json [--iters 20] [--warmup 5] [--out MERGED.json]

Each row of gemm_bench's JSON (name, trans_a, trans_b, M, N, K, vtrain_tflops) gains torch_tflops
and ratio (vtrain / torch). An operand that vtrain stores transposed is a transposed view in
torch as well (A (K, M) viewed as (M, K)), so both sides see the same memory layouts. Timing:
CUDA events around `iters` calls after `warmup`. Exit 0 with the merged JSON; exit 77 (and the
reason on stderr, the JSON unchanged but for a "torch" field saying why) when torch or a CUDA
device is missing, as on the CUDA emulation.
"""
from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gemm_json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", help="merged JSON (default: rewrite the input)")
    args = ap.parse_args()
    with open(args.gemm_json) as f:
        data = json.load(f)
    out = args.out or args.gemm_json
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:  # ImportError, or no device
        data["torch"] = f"not measured: {e}"
        with open(out, "w") as f:
            json.dump(data, f, indent=1)
        print(f"gemm_torch: {data['torch']}", file=sys.stderr)
        return 77
    data["torch"] = torch.__version__
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    print(f"{'gemm':14s} {'vtrain TF/s':>11s} {'torch TF/s':>11s} {'vtrain/torch':>12s}")
    fl_all = ms_all = 0.0
    for r in data["rows"]:
        M, N, K = r["M"], r["N"], r["K"]
        a = torch.randn((K, M) if r["trans_a"] else (M, K), device=dev, dtype=torch.bfloat16)
        b = torch.randn((N, K) if r["trans_b"] else (K, N), device=dev, dtype=torch.bfloat16)
        a = a.t() if r["trans_a"] else a
        b = b.t() if r["trans_b"] else b
        for _ in range(args.warmup):
            torch.matmul(a, b)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(args.iters):
            torch.matmul(a, b)
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / args.iters
        flops = 2.0 * M * N * K
        r["torch_ms"] = ms
        r["torch_tflops"] = flops / (ms * 1e-3) / 1e12
        r["ratio"] = r["vtrain_tflops"] / r["torch_tflops"] if r["torch_tflops"] > 0 else None
        fl_all += flops
        ms_all += ms
        print(f"{r['name']:14s} {r['vtrain_tflops']:11.1f} {r['torch_tflops']:11.1f} "
              f"{r['ratio']:12.2f}")
    data["torch_all_tflops"] = fl_all / (ms_all * 1e-3) / 1e12 if ms_all > 0 else None
    if data.get("all_tflops") and data["torch_all_tflops"]:
        data["all_ratio"] = data["all_tflops"] / data["torch_all_tflops"]
        print(f"{'all':14s} {data['all_tflops']:11.1f} {data['torch_all_tflops']:11.1f} "
              f"{data['all_ratio']:12.2f}")
    with open(out, "w") as f:
        json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
