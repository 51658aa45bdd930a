"""Checkpoint speed against the disk: the same number of bytes written by `dd ... conv=fsync` and
by a vtrain checkpoint save (file written, fsynced, reopened and verified, renamed), measured in
one run on the same directory, and the training pause of a synchronous save against an
asynchronous one (--async-save: the pause is the snapshot into host memory).

  .venv/bin/python bench/bench_checkpoint.py --dir /path/on/the/disk [--layers 12 --dim 768]

Prints the checkpoint size, dd's MB/s, vtrain's MB/s for the write (save time from vtrain's
"saved checkpoint ... (S s)" line), their ratio, and the pauses. The model is d12's blocks with a
4096-token vocabulary and short sequences, so steps are cheap and the save dominates."""
import argparse
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


def dd_rate(directory, nbytes):
    path = os.path.join(directory, "dd.bin")
    count = max(1, nbytes // (1 << 20))
    t0 = time.time()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True)
    dt = time.time() - t0
    os.remove(path)
    return count * (1 << 20) / dt / 1e6


def save_runs(data, directory, args, async_save):
    ckpt = os.path.join(directory, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    metrics = os.path.join(directory, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [VTRAIN, "train", "--data", data, "--layers", str(args.layers), "--dim", str(args.dim),
           "--heads", str(args.dim // 64), "--seq-len", "32", "--window", "32", "--micro-batch", "1",
           "--steps", str(args.saves), "--ckpt-dir", ckpt, "--ckpt-every", "1", "--keep-last", "2",
           "--final-eval-tokens", "0", "--metrics", metrics]
    if async_save:
        cmd.append("--async-save")
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    if r.returncode != 0:
        sys.exit(r.stderr)
    writes = [float(x) for x in re.findall(r"saved checkpoint \S+ \(([0-9.]+) s", r.stdout)]
    pauses = [float(x) for x in re.findall(r'"ckpt_pause_s":([0-9.eE+-]+)', open(metrics).read())]
    size = os.path.getsize(os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip()))
    return size, writes, pauses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--saves", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="vtrain-bench-ckpt-", dir=args.dir)
    try:
        data = prepare(work)
        size, writes, pauses = save_runs(data, work, args, async_save=False)
        _, awrites, apauses = save_runs(data, work, args, async_save=True)
        dd = statistics.median(dd_rate(work, size) for _ in range(3))
        w = statistics.median(writes)
        mb = size / 1e6
        print(f"checkpoint: {mb:.0f} MB (L{args.layers} d{args.dim}, parameters and optimizer states)")
        print(f"dd conv=fsync:        {dd:8.1f} MB/s  (median of 3)")
        print(f"vtrain save (sync):   {mb / w:8.1f} MB/s  ({w:.2f} s, median of {len(writes)})"
              f"  = {mb / w / dd:.2f}x dd")
        print(f"vtrain save (async):  {mb / statistics.median(awrites):8.1f} MB/s in the background")
        print(f"training pause per save: sync {statistics.median(pauses):.3f} s, async "
              f"{statistics.median(apauses):.3f} s ({statistics.median(pauses) / max(statistics.median(apauses), 1e-6):.1f}x shorter)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
