"""Tokenizer speed of vtrain against its peers, measured in the same run, on all cores:
  - BPE training: vtrain's trainer (`data_tool train-bpe`) against Hugging Face `tokenizers`
    (BpeTrainer with the same GPT-4 pre-split regex, byte-level alphabet, vocabulary and special
    token), both on the same documents;
  - encoding: vtrain's encoder (`data_tool encode-docs`, documents in parallel on OpenMP threads)
    against tiktoken's `encode_ordinary_batch` (its thread pool) with an Encoding built from
    vtrain's own merges (mergeable_ranks = our token bytes -> id, the same pattern), and a check
    that the two give identical ids on every document of a mixed corpus: prose, source code,
    numbers, non-Latin scripts, emoji, and documents with invalid UTF-8. tiktoken's public API takes
    str, so for documents with invalid bytes the harness splits them at the invalid runs: valid text
    through encode_ordinary, each run of invalid bytes through (_)encode_single_piece (vtrain's
    pre-tokenizer makes exactly such a run one chunk).
  - `vtrain prepare` end to end on the same corpus as .jsonl.zst shards: 1 rank x 1 thread,
    1 rank x all threads, and mpirun with one rank per core; and from its MB/s per core, the
    core-hours to prepare 200B tokens.
Timings are repeated (--repeats) and reported as median [min, max]; the machine may be shared.

  .venv/bin/python bench/bench_tokenizer.py [--mb 24] [--vocab 8192] [--repeats 3] [--json FILE]
"""
import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("VTRAIN_BUILD", ROOT / "build"))
PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""


def cores():
    return len(os.sched_getaffinity(0))


def spread(xs):
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"


# --- the mixed corpus -------------------------------------------------------------------------------

def prose_docs():
    text = subprocess.run(["bible", "Gen1:1-Rev22:21"], capture_output=True, text=True).stdout
    if len(text) < 1_000_000:
        sys.exit("the bible-kjv package is needed (scripts/setup.sh installs it)")
    chapters = [c for c in text.split("\n\n") if c.strip()]
    return chapters


def code_docs():
    docs = []
    for p in sorted(list((ROOT / "src").rglob("*.cc")) + list((ROOT / "src").rglob("*.h")) + list((ROOT / "kernels").rglob("*.cu*"))):
        docs.append(p.read_text(errors="replace"))
    return docs


def number_docs(rng, n):
    out = []
    for _ in range(n):
        rows = [", ".join(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 6)}f}" for _ in range(8)) for _ in range(20)]
        rows += [f"{rng.randint(0, 10**12)} {rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}" for _ in range(10)]
        out.append("\n".join(rows))
    return out


SCRIPTS = [(0x430, 0x44F), (0x3B1, 0x3C9), (0x627, 0x64A), (0x915, 0x939), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x5D0, 0x5EA), (0xE01, 0xE2E)]
EMOJI = [chr(c) for c in range(0x1F600, 0x1F64F)] + ["\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F44D\U0001F3FD", "\u2764\uFE0F", "\U0001F1EB\U0001F1F7"]


def script_docs(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(SCRIPTS)
        words = ["".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))) for _ in range(300)]
        for i in range(0, len(words), 7):
            words[i] += rng.choice([".", ",", "!", " " + rng.choice(EMOJI), "\n", " 123"])
        out.append(" ".join(words))
    return out


def invalid_docs(rng, base):
    out = []
    for d in base:
        b = bytearray(d.encode())
        for _ in range(rng.randint(1, 20)):
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\x80\x80", bytes([rng.randint(128, 255)])])
        out.append(bytes(b))
    return out


def make_corpus(mb, seed):
    rng = random.Random(seed)
    prose, code = prose_docs(), code_docs()
    docs = []
    target = mb * 1_000_000
    while sum(len(d) for d in docs) < target:
        docs += [d.encode() for d in prose] + [d.encode() for d in code]
        docs += [d.encode() for d in number_docs(rng, 200)] + [d.encode() for d in script_docs(rng, 200)]
        docs += invalid_docs(rng, rng.sample(prose, 50) + rng.sample(code, 20))
    rng.shuffle(docs)
    return docs


def write_docs(path, docs):
    with open(path, "wb") as f:
        for d in docs:
            f.write(struct.pack("<I", len(d)))
            f.write(d)


def read_ids(path):
    data = Path(path).read_bytes()
    out, p = [], 0
    while p < len(data):
        (n,) = struct.unpack_from("<I", data, p)
        out.append(list(struct.unpack_from(f"<{n}I", data, p + 4)))
        p += 4 + 4 * n
    return out


def valid(d):
    try:
        d.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# --- tiktoken from our merges ------------------------------------------------------------------------

def tiktoken_encoding(tokenizer_json):
    import base64
    import tiktoken
    t = json.loads(Path(tokenizer_json).read_text())
    ranks = {base64.b64decode(b): i for i, b in enumerate(t["tokens"]) if b}
    return tiktoken.Encoding(name="vtrain-bpe", pat_str=t["pattern"], mergeable_ranks=ranks,
                             special_tokens=dict(t["specials"]))


def tiktoken_encode_bytes(enc, d):
    """Valid runs through encode_ordinary, runs of invalid bytes through encode_single_piece."""
    s = d.decode("utf-8", errors="surrogateescape")
    out, i = [], 0
    while i < len(s):
        j = i
        bad = 0xDC80 <= ord(s[i]) <= 0xDCFF
        while j < len(s) and (0xDC80 <= ord(s[j]) <= 0xDCFF) == bad:
            j += 1
        part = s[i:j]
        if bad:
            single = getattr(enc, "encode_single_piece", None) or enc._encode_single_piece
            out += single(bytes(ord(c) - 0xDC00 for c in part))
        else:
            out += enc.encode_ordinary(part)
        i = j
    return out


# --- the measurements --------------------------------------------------------------------------------

def bench_training(tmp, docs, vocab, repeats):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    text_docs = [d.decode() for d in docs if valid(d)]
    path = tmp / "train_docs.bin"
    write_docs(path, [d.encode() for d in text_docs])
    ours, hf = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([str(BUILD / "data_tool"), "train-bpe", "--docs", str(path), "--vocab", str(vocab),
                        "--out", str(tmp / "ours.json"), "--quiet"], check=True, capture_output=True)
        ours.append(time.perf_counter() - t0)
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=["<|bos|>"], show_progress=False)
        t0 = time.perf_counter()
        tok.train_from_iterator(text_docs, trainer)
        hf.append(time.perf_counter() - t0)
    mb = sum(len(d.encode()) for d in text_docs) / 1e6
    return dict(mb=mb, docs=len(text_docs), vocab=vocab, ours_s=ours, hf_s=hf,
                hf_vocab=tok.get_vocab_size(), speedup=statistics.median(hf) / statistics.median(ours))


def bench_encoding(tmp, docs, tokenizer_json, repeats):
    enc = tiktoken_encoding(tokenizer_json)
    # identical ids on every document, invalid UTF-8 included
    all_path, all_ids = tmp / "all_docs.bin", tmp / "all_ids.bin"
    write_docs(all_path, docs)
    subprocess.run([str(BUILD / "data_tool"), "encode-docs", "--tokenizer", str(tokenizer_json), "--docs",
                    str(all_path), "--out", str(all_ids)], check=True, capture_output=True)
    ours_ids = read_ids(all_ids)
    mismatches = [i for i, d in enumerate(docs) if tiktoken_encode_bytes(enc, d) != ours_ids[i]]
    n_invalid = sum(not valid(d) for d in docs)
    # throughput on the valid documents (tiktoken's batch API takes str)
    text_docs = [d for d in docs if valid(d)]
    path = tmp / "text_docs.bin"
    write_docs(path, text_docs)
    strs = [d.decode() for d in text_docs]
    mb = sum(len(d) for d in text_docs) / 1e6
    n = cores()
    r = subprocess.run([str(BUILD / "data_tool"), "encode-docs", "--tokenizer", str(tokenizer_json), "--docs",
                        str(path), "--threads", str(n), "--repeat", str(repeats + 1)],
                       check=True, capture_output=True, text=True)
    ours = json.loads(r.stdout)["seconds"][1:]  # the first pass warms the chunk caches
    enc.encode_ordinary_batch(strs, num_threads=n)
    theirs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        enc.encode_ordinary_batch(strs, num_threads=n)
        theirs.append(time.perf_counter() - t0)
    r1 = subprocess.run([str(BUILD / "data_tool"), "encode-docs", "--tokenizer", str(tokenizer_json), "--docs",
                         str(path), "--threads", "1", "--repeat", "2"], check=True, capture_output=True, text=True)
    one = json.loads(r1.stdout)["seconds"][1:]
    return dict(docs=len(docs), invalid_docs=n_invalid, mismatched_docs=len(mismatches),
                first_mismatches=mismatches[:5], mb=mb, threads=n,
                ours_mb_s=[mb / s for s in ours], tiktoken_mb_s=[mb / s for s in theirs],
                ours_1thread_mb_s=[mb / s for s in one],
                ratio=statistics.median(theirs) / statistics.median(ours),
                bytes_per_token=sum(len(d) for d in docs) / sum(len(x) for x in ours_ids))


def bench_prepare_cli(tmp, docs, repeats):
    """vtrain prepare on 8 .jsonl.zst shards with the trained tokenizer's merges (tiktoken file)."""
    import base64
    text_docs = [d.decode() for d in docs if valid(d)]
    shards = tmp / "shards"
    shards.mkdir(exist_ok=True)
    for k in range(8):
        p = shards / f"part_{k:03d}.jsonl"
        with open(p, "w") as f:
            for d in text_docs[k::8]:
                f.write(json.dumps({"text": d}) + "\n")
        subprocess.run(["zstd", "-q", "-f", "--rm", str(p)], check=True)
    t = json.loads((tmp / "ours.json").read_text())
    ranks = tmp / "ours.tiktoken"
    ranks.write_text("".join(f"{b} {i}\n" for i, b in enumerate(t["tokens"]) if b))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    n = cores()
    mb = sum(len(d.encode()) for d in text_docs) / 1e6
    common = [str(BUILD / "vtrain"), "prepare", "--input", str(shards / "part_*.jsonl.zst"), "--tokenizer",
              f"tiktoken:{ranks}", "--quiet", "--force"]
    setups = {"1 rank x 1 thread": ([], ["--threads", "1"]),
              f"1 rank x {n} threads": ([], ["--threads", str(n)]),
              f"mpirun -np {n} x 1 thread": (["mpirun", "--oversubscribe", "-np", str(n)], ["--threads", "1"])}
    out = {}
    for name, (pre, extra) in setups.items():
        secs = []
        for r in range(repeats):
            t0 = time.perf_counter()
            subprocess.run(pre + common + ["--out", str(tmp / "prep")] + extra, check=True, capture_output=True, env=env)
            secs.append(time.perf_counter() - t0)
        out[name] = dict(seconds=secs, mb_s=[mb / s for s in secs])
    base = statistics.median(out["1 rank x 1 thread"]["seconds"])
    for v in out.values():
        v["speedup"] = base / statistics.median(v["seconds"])
    return dict(mb=mb, setups=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=24)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--bytes-per-token", type=float, default=None,
                    help="for the 200B-token estimate (default: what the trained tokenizer gives here)")
    a = ap.parse_args()
    for tool in ["data_tool", "vtrain"]:
        if not (BUILD / tool).exists():
            sys.exit(f"{BUILD / tool} not found; build first (bash scripts/build.sh)")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        docs = make_corpus(a.mb, a.seed)
        print(f"corpus: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} MB "
              f"({sum(not valid(d) for d in docs)} with invalid UTF-8); {cores()} cores", flush=True)
        tr = bench_training(tmp, docs, a.vocab, a.repeats)
        print(f"BPE training, vocab {a.vocab}, {tr['mb']:.1f} MB: vtrain {spread(tr['ours_s'])} s, "
              f"HF tokenizers {spread(tr['hf_s'])} s -> vtrain {tr['speedup']:.2f}x faster", flush=True)
        en = bench_encoding(tmp, docs, tmp / "ours.json", a.repeats)
        print(f"encoding, {en['mb']:.1f} MB of valid text on {en['threads']} threads: vtrain "
              f"{spread(en['ours_mb_s'])} MB/s, tiktoken {spread(en['tiktoken_mb_s'])} MB/s -> vtrain "
              f"{en['ratio']:.2f}x; vtrain on 1 thread {spread(en['ours_1thread_mb_s'])} MB/s", flush=True)
        print(f"identical ids: {en['docs'] - en['mismatched_docs']}/{en['docs']} documents "
              f"({en['invalid_docs']} with invalid UTF-8); bytes/token {en['bytes_per_token']:.2f}", flush=True)
        pr = bench_prepare_cli(tmp, docs, a.repeats)
        for name, v in pr["setups"].items():
            print(f"vtrain prepare ({pr['mb']:.1f} MB, 8 .jsonl.zst shards), {name}: {spread(v['seconds'])} s, "
                  f"{statistics.median(v['mb_s']):.2f} MB/s, speed-up {v['speedup']:.2f}x", flush=True)
        best = max(pr["setups"].values(), key=lambda v: statistics.median(v["mb_s"]))
        per_core = statistics.median(best["mb_s"]) / cores()
        bpt = a.bytes_per_token or en["bytes_per_token"]
        core_hours = 200e9 * bpt / 1e6 / per_core / 3600
        print(f"200B tokens at {bpt:.2f} bytes/token = {200e9 * bpt / 1e12:.2f} TB of text; at "
              f"{per_core:.2f} MB/s per core (vtrain prepare, best setup): {core_hours:,.0f} core-hours", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(dict(training=tr, encoding=en, prepare=pr,
                                                    core_hours_200b=core_hours, bytes_per_token=bpt), indent=2))
        return 0 if en["mismatched_docs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
