"""Step time of the block shapes against prenorm at the same width, arms alternating within each
round (so slow drifts of a shared machine fall on every arm alike), from the per-step tok/s of
the metrics files.

  .venv/bin/python bench/bench_block_step_time.py --data DATADIR [--rounds 3] [--blocks ...]

Two shapes: the tiny preset at 8 layers (d128, T256, micro-batch 8, 20 steps) and a wider one
(8 layers, d512, 4 heads of 128, T512, micro-batch 4, 8 steps). Prints, per shape and block, the
median tok/s over the steps after the third of every round and its ratio to prenorm, and the
90th percentile (the least disturbed steps) with its ratio."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRAIN = os.path.join(os.environ.get("VTRAIN_BUILD", os.path.join(ROOT, "build")), "vtrain")

SHAPES = {
    "tiny d128 T256": (["--preset", "tiny", "--layers", "8", "--micro-batch", "8"], 20),
    "d512 T512": (["--preset", "tiny", "--layers", "8", "--dim", "512", "--heads", "4",
                   "--kv-heads", "4", "--head-dim", "128", "--seq-len", "512",
                   "--micro-batch", "4"], 8),
}


def run(data, flags, block, steps, metrics):
    if os.path.exists(metrics):  # vtrain never truncates a metrics file on a fresh run
        os.remove(metrics)
    cmd = [VTRAIN, "train", "--data", data, *flags, "--block", block, "--steps", str(steps),
           "--eval-every", "0", "--eval-tokens", "1024", "--final-eval-tokens", "0",
           "--metrics", metrics, "--log-every", "1000"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return [d["tok_per_s"] for d in map(json.loads, open(metrics))
            if "tok_per_s" in d and d["step"] > 3]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a vtrain data directory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blocks", default="prenorm,parallel,sas,sas-p",
                    help="comma-separated shapes; the first is the reference")
    args = ap.parse_args()
    blocks = args.blocks.split(",")
    tok = {(s, b): [] for s in SHAPES for b in blocks}
    with tempfile.TemporaryDirectory(prefix="vtrain-block-speed-") as tmp:
        for _ in range(args.rounds):
            for shape, (flags, steps) in SHAPES.items():
                for b in blocks:
                    tok[(shape, b)] += run(args.data, flags, b, steps, os.path.join(tmp, "m.jsonl"))
    print("| shape | block | steps | median tok/s | vs " + blocks[0] + " | p90 tok/s | vs " + blocks[0] + " |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        ref = tok[(shape, blocks[0])]
        ref_med, ref_p90 = statistics.median(ref), statistics.quantiles(ref, n=10)[-1]
        for b in blocks:
            v = tok[(shape, b)]
            med, p90 = statistics.median(v), statistics.quantiles(v, n=10)[-1]
            print(f"| {shape} | {b} | {len(v)} | {med:,.0f} | {med / ref_med:.3f}x | {p90:,.0f} | "
                  f"{p90 / ref_p90:.3f}x |")


if __name__ == "__main__":
    main()
