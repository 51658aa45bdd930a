"""What the machine's SGEMM rate allows for one CPU training step: every matrix product of a
baseline step (forward, both backward products of each linear layer and of lm_head, and Muon's
Newton-Schulz iterations on every block matrix), each timed on its own with numpy's float32
matmul at its exact shape, summed. That sum is a floor for the step time of any implementation
that does its matmuls through the same SGEMM; the rest of a step (attention, norms, the
element-wise ops, the optimizer's other work) comes on top.

    .venv/bin/python bench/sgemm_bound.py --layers 4 --dim 512 --heads 4 --kv-heads 4 \
        --seq-len 512 --micro-batch 4 --vocab 4096 [--threads N]

bench_cpu_vs_jax.py --sgemm runs it (in a subprocess, so the thread count applies to numpy's
BLAS) beside vtrain's measured step. Prints the GEMM count, their FLOPs, the summed time and
the bound in tokens/s; --json writes the same."""
import argparse
import json
import os
import sys
import time
from collections import Counter


def step_gemms(L, d, H, Hkv, hd, T, B, V, ns_steps=5):
    """(M, K, N) -> count, for a baseline step of micro-batch B x T (tokens n = B*T)."""
    n = B * T
    vp = (V + 63) // 64 * 64
    linears = [(d, H * hd), (d, Hkv * hd), (d, Hkv * hd), (H * hd, d), (d, 4 * d), (4 * d, d)]
    g = Counter()
    for i, o in linears * L + [(d, vp)]:
        g[(n, i, o)] += 1  # y = x W
        g[(n, o, i)] += 1  # dx = dy W^T
        g[(i, n, o)] += 1  # dW = x^T dy
    for r, c in linears * L:  # Newton-Schulz on the smaller side s of an r x c matrix
        s, l = min(r, c), max(r, c)
        g[(s, l, s)] += ns_steps       # A = X X^T
        g[(s, s, s)] += ns_steps       # A A
        g[(s, s, l)] += ns_steps       # B X
    return g


def time_gemm(np, m, k, n, min_s=0.15):
    a = np.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    np.matmul(a, b, out=c)  # warm-up
    best, spent, reps = float("inf"), 0.0, 0
    while spent < min_s or reps < 3:
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


def bound(L, d, H, Hkv, hd, T, B, V):
    import numpy as np
    gemms = step_gemms(L, d, H, Hkv, hd, T, B, V)
    total_s = total_flops = 0.0
    for (m, k, n), count in gemms.items():
        total_s += count * time_gemm(np, m, k, n)
        total_flops += count * 2.0 * m * k * n
    return dict(gemms=sum(gemms.values()), shapes=len(gemms), gflop=total_flops / 1e9,
                sgemm_s=total_s, gflops=total_flops / total_s / 1e9, tok_s=B * T / total_s)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("layers", "dim", "heads", "kv-heads", "seq-len", "micro-batch", "vocab"):
        p.add_argument(f"--{f}", type=int, required=True)
    p.add_argument("--head-dim", type=int, default=None, help="default: dim / heads")
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS threads (default: as the environment says)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.threads:
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[k] = str(a.threads)
    hd = a.head_dim or a.dim // a.heads
    r = bound(a.layers, a.dim, a.heads, a.kv_heads, hd, a.seq_len, a.micro_batch, a.vocab)
    print(f"SGEMM floor of one step: {r['gemms']} GEMMs ({r['shapes']} shapes), "
          f"{r['gflop']:.1f} GFLOP in {r['sgemm_s'] * 1e3:.1f} ms = {r['gflops']:.1f} GFLOP/s "
          f"-> at most {r['tok_s']:,.0f} tok/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
