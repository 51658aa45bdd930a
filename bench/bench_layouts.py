"""Step time of every dp x tp x pp layout against one process, for the same model and global
batch on this machine, and the share of each step rank 0 spends inside communication.

    .venv/bin/python bench/bench_layouts.py [--data DATADIR] [--steps 12] [--ranks 4]
                                            [--no-layouts] [--no-bubble]

Prints a markdown table: layout, ranks, median step seconds, ratio to one process (lower is
faster), tokens/s, and the communication share (time in MPI calls / step time, rank 0). On a
2-core machine several ranks oversubscribe the cores, so ratios above 1 are expected here; the
numbers show the engine's overhead, not multi-node scaling.

Then the pipeline bubble of plain (v = 1) and interleaved (v = 2, --vpp) 1F1B for pp = 2 and 4 on
an 8-layer model with m micro-batches per step: the measured bubble is the time the pipeline
ranks waited for another stage over the time they worked (pp_wait_s / pp_busy_s of the metrics,
averaged over the ranks), and the replayed bubble (the schedule re-timed with the measured pass
times, each rank on a core of its own, as the busiest rank's idle share: pp_replay_s /
pp_pass_max_s - 1), against the theory
(p-1)/(v m) of the ideal step. With more ranks than cores the ranks share cores (a rank's work
stretches while another waits), so the wall measurement is rough there; the table says how many
cores the machine has."""
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


def run(data, dp, tp, pp, args, tmp, vpp=1, extra=(), global_rows=None, micro_batch=None):
    metrics = os.path.join(tmp, f"m_{dp}{tp}{pp}{vpp}.jsonl")
    if os.path.exists(metrics):  # vtrain never truncates a metrics file on a fresh run
        os.remove(metrics)
    micro_rows = micro_batch or args.micro_batch
    global_batch = (global_rows or args.global_rows) * args.seq_len
    cmd = [VTRAIN, "train", "--data", data, "--preset", "tiny", "--seq-len", str(args.seq_len),
           "--value", args.value, "--micro-batch", str(micro_rows), "--global-batch",
           str(global_batch), "--steps", str(args.steps), "--tp", str(tp), "--pp", str(pp),
           "--eval-tokens", str(args.seq_len * micro_rows * dp), "--final-eval-tokens", "0",
           "--metrics", metrics, *extra]
    if vpp > 1:
        cmd += ["--vpp", str(vpp)]
    n = dp * tp * pp
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, os.cpu_count() // n)),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(n)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    rows = [json.loads(l) for l in open(metrics) if '"tok_per_s"' in l][args.warmup:]
    step_s = statistics.median(global_batch / x["tok_per_s"] for x in rows)
    comm = [x.get("comm_s", 0.0) * x["tok_per_s"] / global_batch for x in rows]
    bubble = [x["pp_wait_s"] / x["pp_busy_s"] for x in rows if x.get("pp_busy_s", 0) > 0]
    replay_mean = [x["pp_replay_s"] / x["pp_pass_s"] - 1 for x in rows if x.get("pp_pass_s", 0) > 0]
    replay_max = [x["pp_replay_s"] / x["pp_pass_max_s"] - 1 for x in rows
                  if x.get("pp_pass_max_s", 0) > 0]
    med = lambda v: statistics.median(v) if v else 0.0
    return step_s, statistics.median(comm), (med(bubble), med(replay_mean), med(replay_max))


def bubble_table(data, args, tmp):
    """Measured pipeline bubble against (p-1)/(v m) for p = 2, 4 and v = 1, 2."""
    m = args.bubble_micro
    print(f"\nPipeline bubble: 8 layers, {m} micro-batches of {args.micro_batch} rows per step, "
          f"dp = tp = 1, {os.cpu_count()} cores for up to 4 ranks (measured = wait / work of the "
          f"pipeline ranks, median of {args.steps - args.warmup} steps; rough where ranks share "
          f"cores)\n")
    print("| p | v | m | theory (p-1)/(v m) | measured (wall) | replayed, mean rank | "
          "replayed, busiest rank | step s | step vs v=1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in (2, 4):
        base = None
        for v in (1, 2):
            step_s, _, (bubble, r_mean, r_max) = run(data, 1, 1, p, args, tmp, vpp=v,
                                                     extra=["--layers", "8"],
                                                     global_rows=m * args.micro_batch)
            base = base or step_s
            print(f"| {p} | {v} | {m} | {(p - 1) / (v * m):.3f} | {bubble:.3f} | {r_mean:.3f} | "
                  f"{r_max:.3f} | {step_s:.3f} | {step_s / base:.2f}x |", flush=True)
    print("\nmeasured (wall): the seconds the pipeline ranks waited for another stage over the "
          "seconds they worked, averaged over the ranks; it includes the stages' imbalance (the "
          "last also runs the lm_head and loss) and the time-slicing of ranks sharing cores. "
          "replayed: the schedule re-timed with each pass's measured time as if every rank had a "
          "core of its own and messages were free (pp_replay_s), over the mean rank's work "
          "(pp_pass_s: includes the imbalance) and over the busiest rank's (pp_pass_max_s: the "
          "critical rank's idle share, below the theory when the other stages are lighter); the "
          "theory assumes equal stages and lies between them when imbalance is all that differs. "
          "The pass times still come from ranks that shared cores.")


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
    p.add_argument("--bubble-micro", type=int, default=8,
                   help="micro-batches per step of the bubble table (a multiple of 4)")
    p.add_argument("--no-layouts", action="store_true", help="only the bubble table")
    p.add_argument("--no-bubble", action="store_true", help="only the layouts table")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or prepare(tmp)
        if not args.no_layouts:
            layouts_table(data, args, tmp)
        if not args.no_bubble:
            bubble_table(data, args, tmp)


def layouts_table(data, args, tmp):
    layouts = [(1, 1, 1)] + [(dp, tp, pp) for dp in (1, 2, 4) for tp in (1, 2, 4)
                             for pp in (1, 2, 4)
                             if 1 < dp * tp * pp <= args.ranks and tp <= 4
                             and args.global_rows % (args.micro_batch * dp) == 0]
    base = None
    print("| layout (dp x tp x pp) | ranks | step s | vs 1 process | tok/s | comm share |")
    print("|---|---|---|---|---|---|")
    for dp, tp, pp in layouts:
        step_s, comm, _ = run(data, dp, tp, pp, args, tmp)
        base = base or step_s
        tok = args.global_rows * args.seq_len / step_s
        print(f"| {dp} x {tp} x {pp} | {dp*tp*pp} | {step_s:.3f} | {step_s/base:.2f}x | "
              f"{tok:,.0f} | {100*comm:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
