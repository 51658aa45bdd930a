"""Step time of every dp x tp x pp layout against one process, for the same model and global
batch on this machine, and the share of each step rank 0 spends inside communication.

    .venv/bin/python bench/bench_layouts.py [--data DATADIR] [--steps 12] [--ranks 4]

Prints a markdown table: layout, ranks, median step seconds, ratio to one process (lower is
faster), tokens/s, and the communication share (time in MPI calls / step time, rank 0). On a
2-core machine several ranks oversubscribe the cores, so ratios above 1 are expected here; the
numbers show the engine's overhead, not multi-node scaling."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRAIN = os.path.join(os.environ.get("VTRAIN_BUILD", os.path.join(ROOT, "build")), "vtrain")


def prepare(tmp):
    text = subprocess.run(["bible", "Gen1:1-Exo40:38"], capture_output=True, text=True).stdout
    src = os.path.join(tmp, "corpus.txt")
    open(src, "w").write(text)
    out = os.path.join(tmp, "data")
    subprocess.run([VTRAIN, "prepare", "--input", src, "--out", out, "--tokenizer", "bpe:1024",
                    "--quiet"], check=True)
    return out


def run(data, dp, tp, pp, args, tmp):
    metrics = os.path.join(tmp, f"m_{dp}{tp}{pp}.jsonl")
    micro_rows = args.micro_batch
    global_batch = args.global_rows * args.seq_len
    cmd = [VTRAIN, "train", "--data", data, "--preset", "tiny", "--seq-len", str(args.seq_len),
           "--value", args.value, "--micro-batch", str(micro_rows), "--global-batch",
           str(global_batch), "--steps", str(args.steps), "--tp", str(tp), "--pp", str(pp),
           "--eval-tokens", str(args.seq_len * micro_rows * dp), "--metrics", metrics]
    n = dp * tp * pp
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, os.cpu_count() // n)),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(n)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    rows = [json.loads(l) for l in open(metrics) if '"tok_per_s"' in l][args.warmup:]
    step_s = statistics.median(global_batch / x["tok_per_s"] for x in rows)
    comm = [x.get("comm_s", 0.0) * x["tok_per_s"] / global_batch for x in rows]
    return step_s, statistics.median(comm)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--global-rows", type=int, default=8)
    p.add_argument("--value", default="bov")
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or prepare(tmp)
        layouts = [(1, 1, 1)] + [(dp, tp, pp) for dp in (1, 2, 4) for tp in (1, 2, 4)
                                 for pp in (1, 2, 4)
                                 if 1 < dp * tp * pp <= args.ranks and tp <= 4
                                 and args.global_rows % (args.micro_batch * dp) == 0]
        base = None
        print("| layout (dp x tp x pp) | ranks | step s | vs 1 process | tok/s | comm share |")
        print("|---|---|---|---|---|---|")
        for dp, tp, pp in layouts:
            step_s, comm = run(data, dp, tp, pp, args, tmp)
            base = base or step_s
            tok = args.global_rows * args.seq_len / step_s
            print(f"| {dp} x {tp} x {pp} | {dp*tp*pp} | {step_s:.3f} | {step_s/base:.2f}x | "
                  f"{tok:,.0f} | {100*comm:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
