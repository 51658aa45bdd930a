# bench/synthetic_data.py owns the synthetic data directories of the GPU benchmark and of the
# torch-model check: a vtrain data directory whose tokenizer has exactly the vocabulary asked
# for, and whose train/val shards hold generated tokens instead of encoded text.
"""Synthetic vtrain data directories (numpy only; needs the vtrain binary for `prepare`).

`make_data_dir(vtrain, out, vocab_size, train_tokens, val_tokens)`:
  1. writes a .tiktoken ranks file with vocab_size - 1 regular tokens (the 256 single bytes,
     then distinct 2-byte strings), so that `vtrain prepare --tokenizer tiktoken:FILE` makes a
     tokenizer of exactly `vocab_size` ids (the regular ones + <|bos|>);
  2. runs `vtrain prepare` on a small seed text (this writes tokenizer.json, token_bytes.bin,
     meta.json and shards in the layout vtrain's loader expects);
  3. replaces train_000000.bin and val_000000.bin with generated tokens in the llm.c shard
     format of src/data/shards.h (256 int32 header: magic 20240520 for uint16 / 20240801 for
     uint32 tokens, version 1, token count; then the tokens), and updates meta.json's counts.
Token streams: "uniform" (i.i.d. ids, for speed runs) or "markov" (next = perm[cur] with
probability 0.75, else uniform: learnable structure, for correctness checks).
"""
from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import numpy as np

MAGIC_U16, MAGIC_U32 = 20240520, 20240801


def write_ranks_file(path: Path, n_regular: int):
    if n_regular < 256 or n_regular > 256 + 65536:
        raise ValueError(f"need 256 <= regular tokens <= {256 + 65536}, got {n_regular}")
    lines = []
    for r in range(n_regular):
        b = bytes([r]) if r < 256 else bytes(divmod(r - 256, 256))
        lines.append(f"{base64.b64encode(b).decode()} {r}")
    path.write_text("\n".join(lines) + "\n")


def write_shard(path: Path, tokens: np.ndarray, vocab_size: int):
    wide = vocab_size >= 65536
    h = np.zeros(256, np.int32)
    h[0], h[1], h[2] = (MAGIC_U32 if wide else MAGIC_U16), 1, len(tokens)
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(tokens.astype(np.uint32 if wide else np.uint16).tobytes())


def shard_num_tokens(path) -> int:
    return int(np.fromfile(path, dtype=np.int32, count=256)[2])


def read_shard(path, count: int | None = None, offset: int = 0) -> np.ndarray:
    h = np.fromfile(path, dtype=np.int32, count=256)
    dtype = {MAGIC_U16: np.uint16, MAGIC_U32: np.uint32}.get(int(h[0]))
    if dtype is None:
        raise ValueError(f"{path}: unknown shard magic {h[0]}")
    n = int(h[2])
    if count is None:
        count = n - offset
    if offset + count > n:
        raise ValueError(f"{path}: wants tokens [{offset}, {offset + count}) of {n}")
    width = np.dtype(dtype).itemsize
    return np.fromfile(path, dtype=dtype, count=count, offset=1024 + offset * width).astype(np.int64)


def generate_tokens(n: int, vocab_size: int, kind: str = "uniform", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.integers(0, vocab_size, size=n, dtype=np.int64)
    if kind == "markov":
        perm = rng.permutation(vocab_size)
        jump = rng.random(n) >= 0.75
        rand = rng.integers(0, vocab_size, size=n)
        out = np.empty(n, np.int64)
        cur = int(rand[0])
        for i in range(n):
            cur = int(rand[i]) if jump[i] else int(perm[cur])
            out[i] = cur
        return out
    raise ValueError(f"unknown token stream kind {kind!r}")


def make_data_dir(vtrain: str, out, vocab_size: int, train_tokens: int, val_tokens: int,
                  kind: str = "uniform", seed: int = 0) -> Path:
    out = Path(out)
    work = out.parent / (out.name + ".src")
    work.mkdir(parents=True, exist_ok=True)
    ranks = work / "ranks.tiktoken"
    write_ranks_file(ranks, vocab_size - 1)
    (work / "seed.txt").write_text("synthetic data for the vtrain benchmark. " * 64)
    r = subprocess.run([vtrain, "prepare", "--input", str(work / "seed.txt"), "--out", str(out),
                        "--tokenizer", f"tiktoken:{ranks}", "--val-fraction", "0.1", "--quiet",
                        "--force"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"vtrain prepare failed (exit {r.returncode}):\n{r.stdout[-1500:]}\n"
                           f"{r.stderr[-1500:]}")
    meta = json.loads((out / "meta.json").read_text())
    if meta["tokenizer"]["vocab_size"] != vocab_size:
        raise RuntimeError(f"prepared vocabulary {meta['tokenizer']['vocab_size']} != {vocab_size}")
    for split, n, s in (("train", train_tokens, seed), ("val", val_tokens, seed + 1)):
        names = meta[split]["shards"]
        for extra in names[1:]:
            (out / extra).unlink(missing_ok=True)
        name = f"{split}_000000.bin"
        write_shard(out / name, generate_tokens(n, vocab_size, kind, s), vocab_size)
        meta[split] = {"tokens": int(n), "shards": [name]}
    meta["synthetic"] = {"kind": kind, "seed": seed}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return out
