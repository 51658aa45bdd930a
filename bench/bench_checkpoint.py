"""Checkpoint speed against the disk: the same number of bytes written by `dd ... conv=fsync` and
by a vtrain checkpoint save (file written, fsynced, reopened and verified, renamed), measured in
one run on the same directory (dd starting, like the save, with the cache of the files there
dropped), and the training pause of a synchronous save against an
asynchronous one (--async-save: the pause is the snapshot into host memory).

  .venv/bin/python bench/bench_checkpoint.py --dir /path/on/the/disk [--layers 12 --dim 768]
  .venv/bin/python bench/bench_checkpoint.py --compare /work/main/build   # before/after

Prints the checkpoint size, dd's MB/s, vtrain's MB/s for the write (save time from vtrain's
"saved checkpoint ... (S s)" line), their ratio per round and the median, and the pauses. The
model is d12's blocks with a 4096-token vocabulary and short sequences, so steps are cheap and
the save dominates. `--compare DIR` runs DIR/vtrain's synchronous saves in every round as well
(e.g. the build of an earlier commit) and prints its rates and ratios beside."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRAIN = os.path.join(os.environ.get("VTRAIN_BUILD", os.path.join(ROOT, "build")), "vtrain")


def prepare(workdir):
    text = subprocess.run(["bible", "Gen1:1-Exo40:38"], capture_output=True, text=True).stdout
    corpus = os.path.join(workdir, "corpus.txt")
    open(corpus, "w").write(text)
    data = os.path.join(workdir, "data")
    subprocess.run([VTRAIN, "prepare", "--input", corpus, "--out", data, "--tokenizer", "bpe:4096",
                    "--quiet"], check=True)
    return data


def drop_cache(directory):
    """Drops the page cache of every file under `directory` (they are on the disk already)."""
    for base, _, files in os.walk(directory):
        for name in files:
            try:
                fd = os.open(os.path.join(base, name), os.O_RDONLY)
            except OSError:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def dd_rate(directory, nbytes):
    # dd starts as a save does (it drops the cache of the older checkpoints first): writing beside
    # cached files makes the kernel find fresh pages, which runs dd at a fraction of its rate on
    # the development VM (380 MB/s against 2.3 GB/s).
    os.sync()
    drop_cache(directory)
    path = os.path.join(directory, "dd.bin")
    count = max(1, nbytes // (1 << 20))
    t0 = time.time()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True)
    dt = time.time() - t0
    os.remove(path)
    return count * (1 << 20) / dt / 1e6


def save_runs(data, directory, args, async_save, vtrain=VTRAIN):
    ckpt = os.path.join(directory, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    metrics = os.path.join(directory, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [vtrain, "train", "--data", data, "--layers", str(args.layers), "--dim", str(args.dim),
           "--heads", str(args.dim // 64), "--seq-len", "32", "--window", "32", "--micro-batch", "1",
           "--steps", str(args.saves), "--ckpt-dir", ckpt, "--ckpt-every", "1", "--keep-last", "2",
           "--final-eval-tokens", "0", "--metrics", metrics]
    if async_save:
        cmd.append("--async-save")
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    if r.returncode != 0:
        sys.exit(r.stderr)
    lines = re.findall(r"saved checkpoint \S+ \(([0-9.]+) s[^:]*: (.*)\)", r.stdout)
    writes = [float(t) for t, _ in lines]
    rows = [json.loads(x) for x in open(metrics) if "ckpt_pause_s" in x]
    pauses = [d["ckpt_pause_s"] for d in rows]
    waits = [d.get("ckpt_wait_s", 0.0) for d in rows]
    size = os.path.getsize(os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip()))
    return dict(size=size, writes=writes, phases=[p for _, p in lines], pauses=pauses, waits=waits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--saves", type=int, default=3, help="saves per run")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of dd, a synchronous run and an asynchronous run, one after another")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--compare", default=None,
                    help="a build directory whose vtrain's synchronous saves also run in every round")
    ap.add_argument("--no-async", action="store_true", help="skip the --async-save runs")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="vtrain-bench-ckpt-", dir=args.dir)
    try:
        data = prepare(work)
        ratios, dds, rates, arates, pauses, apauses, awaits, phases = [], [], [], [], [], [], [], []
        crates, cratios = [], []
        for _ in range(args.rounds):
            # The saves, dd, the other build's saves, the background saves, one after another, so
            # that each round compares the disk with itself seconds apart (the disk of a shared
            # machine varies by minutes).
            sync = save_runs(data, work, args, async_save=False)
            dd = dd_rate(work, sync["size"])
            mb = sync["size"] / 1e6
            rate = mb / statistics.median(sync["writes"])
            dds.append(dd)
            rates.append(rate)
            ratios.append(rate / dd)
            pauses += sync["pauses"]
            phases += list(zip(sync["writes"], sync["phases"]))
            if args.compare:
                other = save_runs(data, work, args, async_save=False,
                                  vtrain=os.path.join(args.compare, "vtrain"))
                crates.append(other["size"] / 1e6 / statistics.median(other["writes"]))
                cratios.append(crates[-1] / dd)
            if not args.no_async:
                bg = save_runs(data, work, args, async_save=True)
                arates.append(mb / statistics.median(bg["writes"]))
                apauses += bg["pauses"]
                awaits += bg["waits"]
        mb = sync["size"] / 1e6
        print(f"checkpoint: {mb:.0f} MB (L{args.layers} d{args.dim}, parameters and optimizer states), "
              f"{args.rounds} rounds")
        print(f"dd conv=fsync:        {statistics.median(dds):8.1f} MB/s  (median; rounds: "
              + ", ".join(f"{x:.0f}" for x in dds) + ")")
        print(f"vtrain save (sync):   {statistics.median(rates):8.1f} MB/s  (median; rounds: "
              + ", ".join(f"{x:.0f}" for x in rates) + ")")
        print(f"save / dd, per round: " + ", ".join(f"{x:.2f}x" for x in ratios)
              + f"  (median {statistics.median(ratios):.2f}x)")
        if args.compare:
            print(f"{args.compare}/vtrain save (sync): {statistics.median(crates):8.1f} MB/s  (median; "
                  "rounds: " + ", ".join(f"{x:.0f}" for x in crates) + ")")
            print(f"  its save / dd, per round: " + ", ".join(f"{x:.2f}x" for x in cratios)
                  + f"  (median {statistics.median(cratios):.2f}x); this save / it, per round: "
                  + ", ".join(f"{a / b:.2f}x" for a, b in zip(rates, crates)))
        print(f"where a synchronous save's time went (median save): {sorted(phases)[len(phases) // 2][1]}")
        if not args.no_async:
            print(f"vtrain save (async):  {statistics.median(arates):8.1f} MB/s in the background")
            print(f"training pause per save: sync {statistics.median(pauses):.3f} s; async snapshot "
                  f"{statistics.median(apauses):.3f} s ({statistics.median(pauses) / max(statistics.median(apauses), 1e-6):.1f}x shorter)"
                  f", plus {statistics.median(awaits):.2f} s waiting for the previous background save "
                  f"(saves every step here: steps are much shorter than a save)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
