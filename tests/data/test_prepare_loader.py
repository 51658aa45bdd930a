"""`prepare` and the loader checked from outside: numpy reads the shards prepare wrote and
rebuilds the token stream from the input files (<|bos|> + bytes per document, files sorted),
checks the documented val split and token_bytes.bin, then recomputes every batch the loader
serves (rows contiguous, targets shifted by one, wrapping around the epoch) for several DP sizes,
including a resume from a saved state under another DP size."""
import json
import math

import numpy as np
import pytest

from conftest import run_tool, run_tool_json_lines


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[1] == 1
    dtype = {20240520: "<u2", 20240801: "<u4"}[int(header[0])]
    toks = np.fromfile(path, dtype=dtype, offset=1024)
    assert len(toks) == header[2]
    return toks.astype(np.int64)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    d = tmp_path_factory.mktemp("prep")
    inp = d / "docs"
    inp.mkdir()
    rng = np.random.default_rng(0)
    docs = {}
    for name in ["c.txt", "a.txt", "b.bin"]:
        data = bytes(rng.integers(0, 256, size=int(rng.integers(50, 400)), dtype=np.uint8))
        (inp / name).write_bytes(data)
        docs[name] = data
    out = d / "data"
    r = run_tool("prepare", "--input", inp, "--out", out, "--tokenizer", "bytes",
                 "--val-fraction", "0.1", "--shard-tokens", "97")
    assert "prepare:" in r.stdout  # progress is printed
    stream = []
    for name in sorted(docs):
        stream += [256] + list(docs[name])
    return out, np.array(stream, dtype=np.int64)


def test_shards_rebuild_the_stream(prepared):
    out, stream = prepared
    meta = json.loads((out / "meta.json").read_text())
    assert meta["created_by"] == "vtrain prepare"
    assert meta["tokenizer"]["kind"] == "bytes" and meta["tokenizer"]["vocab_size"] == 257
    n = len(stream)
    n_val = max(2, math.ceil(0.1 * n))
    train = np.concatenate([read_shard(out / s) for s in meta["train"]["shards"]])
    val = np.concatenate([read_shard(out / s) for s in meta["val"]["shards"]])
    assert len(val) == n_val == meta["val"]["tokens"]
    assert len(train) == n - n_val == meta["train"]["tokens"]
    np.testing.assert_array_equal(np.concatenate([train, val]), stream)
    assert all(len(read_shard(out / s)) <= 97 for s in meta["train"]["shards"])
    assert meta["train"]["shards"] == [f"train_{i:06d}.bin" for i in range(math.ceil((n - n_val) / 97))]
    tb = np.fromfile(out / "token_bytes.bin", dtype="<i4")
    np.testing.assert_array_equal(tb, [1] * 256 + [0])


def expected_rows(stream, start, rows, T):
    n = len(stream)
    idx = (start + np.arange(rows * T + 1)) % n
    toks = stream[idx]
    return toks[:-1].reshape(rows, T), np.stack([toks[r * T + 1:r * T + T + 1] for r in range(rows)])


@pytest.mark.parametrize("dp", [1, 2, 3, 6])
def test_loader_batches_match_numpy(prepared, dp):
    out, stream = prepared
    meta = json.loads((out / "meta.json").read_text())
    train = stream[:meta["train"]["tokens"]]
    B, T, steps = 6, 11, 25  # 25 * 66 tokens: several epochs of the train split
    lines = run_tool_json_lines("batches", "--data", out, "--rows", B, "--seq", T, "--dp", dp, "--steps", steps)
    assert len(lines) == steps * dp
    for step in range(steps):
        inp, tgt = expected_rows(train, step * B * T, B, T)
        mine = [l for l in lines if l["step"] == step]
        got_in = np.concatenate([np.array(l["inputs"]).reshape(B // dp, T) for l in mine])
        got_tg = np.concatenate([np.array(l["targets"]).reshape(B // dp, T) for l in mine])
        np.testing.assert_array_equal(got_in, inp)
        np.testing.assert_array_equal(got_tg, tgt)
    assert lines[-1]["state"]["epoch"] == (steps * B * T) // len(train)


def test_resume_with_another_dp_size(prepared, tmp_path):
    out, stream = prepared
    meta = json.loads((out / "meta.json").read_text())
    train = stream[:meta["train"]["tokens"]]
    B, T = 4, 9
    state = tmp_path / "state.json"
    run_tool("batches", "--data", out, "--rows", B, "--seq", T, "--dp", 2, "--steps", 17, "--state-out", state)
    saved = json.loads(state.read_text())
    assert saved["split"] == "train" and saved["tokens_per_epoch"] == len(train)
    lines = run_tool_json_lines("batches", "--data", out, "--rows", B, "--seq", T, "--dp", 4, "--steps", 5,
                                "--state-in", state)
    for k in range(5):
        inp, tgt = expected_rows(train, (17 + k) * B * T, B, T)
        mine = sorted((l for l in lines if l["step"] == k), key=lambda l: l["rank"])
        np.testing.assert_array_equal(np.concatenate([np.array(l["inputs"]).reshape(1, T) for l in mine]), inp)
        np.testing.assert_array_equal(np.concatenate([np.array(l["targets"]).reshape(1, T) for l in mine]), tgt)


def test_val_split_loader(prepared):
    out, stream = prepared
    meta = json.loads((out / "meta.json").read_text())
    val = stream[meta["train"]["tokens"]:]
    lines = run_tool_json_lines("batches", "--data", out, "--split", "val", "--rows", 2, "--seq", 8, "--steps", 3)
    for k, l in enumerate(lines):
        inp, tgt = expected_rows(val, k * 16, 2, 8)
        np.testing.assert_array_equal(np.array(l["inputs"]).reshape(2, 8), inp)
        np.testing.assert_array_equal(np.array(l["targets"]).reshape(2, 8), tgt)


def test_prepare_errors_are_clear(tmp_path):
    r = run_tool("prepare", "--input", tmp_path / "missing.txt", "--out", tmp_path / "o", "--tokenizer", "bytes",
                 check=False)
    assert r.returncode == 1 and "missing.txt" in r.stderr and "does not exist" in r.stderr
    (tmp_path / "x.txt").write_text("hello world")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    r = run_tool("prepare", "--input", tmp_path / "x.txt", "--out", tmp_path / "busy", "--tokenizer", "bytes",
                 check=False)
    assert r.returncode == 1 and "--force" in r.stderr
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["keep.txt"]
    r = run_tool("prepare", "--input", tmp_path / "x.txt", "--out", tmp_path / "o", "--tokenizer", "bpe:9",
                 check=False)
    assert r.returncode == 1 and "bpe:9" in r.stderr
    assert not (tmp_path / "o").exists()
