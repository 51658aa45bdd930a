"""Token shards checked by an independent reader/writer: numpy parses what vtrain writes
(header ints, dtype, count) and vtrain reads what numpy writes, including corrupt files."""
import json

import numpy as np
import pytest

from conftest import run_tool

HEADER_INTS = 256


def numpy_write_shard(path, tokens, magic, dtype, version=1, count=None, extra=b""):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())
        f.write(extra)


def numpy_read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    dtype = {20240520: "<u2", 20240801: "<u4"}[int(header[0])]
    tokens = np.fromfile(path, dtype=dtype, offset=HEADER_INTS * 4)
    return header, dtype, tokens


@pytest.mark.parametrize("vocab,expect_magic,expect_dtype", [
    (257, 20240520, "<u2"), (65536, 20240520, "<u2"), (65537, 20240801, "<u4"), (100257, 20240801, "<u4")])
def test_vtrain_shard_read_by_numpy(tmp_path, vocab, expect_magic, expect_dtype):
    rng = np.random.default_rng(vocab)
    tokens = rng.integers(0, vocab, size=3001)
    tokens[:2] = [0, vocab - 1]
    src = tmp_path / "tokens.txt"
    src.write_text(" ".join(map(str, tokens)))
    shard = tmp_path / "s.bin"
    run_tool("write-shard", "--out", shard, "--vocab", vocab, "--in", src)
    header, dtype, back = numpy_read_shard(shard)
    assert header[0] == expect_magic and header[1] == 1 and header[2] == len(tokens)
    assert not header[3:].any()
    assert dtype == expect_dtype
    assert shard.stat().st_size == 1024 + len(tokens) * np.dtype(dtype).itemsize
    np.testing.assert_array_equal(back, tokens)


@pytest.mark.parametrize("magic,dtype,top", [(20240520, "<u2", 65535), (20240801, "<u4", 200000)])
def test_numpy_shard_read_by_vtrain(tmp_path, magic, dtype, top):
    tokens = np.arange(0, top + 1, max(1, top // 997), dtype=np.int64)
    tokens[-1] = top
    shard = tmp_path / "np.bin"
    numpy_write_shard(shard, tokens, magic, dtype)
    out = json.loads(run_tool("read-shard", shard).stdout)
    assert out["num_tokens"] == len(tokens)
    assert out["token_width"] == np.dtype(dtype).itemsize
    assert out["tokens"] == tokens.tolist()


@pytest.mark.parametrize("case,words", [
    ("bad_magic", ["magic", "20240520"]),
    ("bad_version", ["version"]),
    ("truncated", ["truncated"]),
    ("trailing", ["trailing"]),
    ("short_header", ["truncated", "header"]),
])
def test_corrupt_numpy_shards_rejected(tmp_path, case, words):
    shard = tmp_path / f"{case}.bin"
    toks = np.arange(50)
    if case == "bad_magic":
        numpy_write_shard(shard, toks, 1234, "<u2")
    elif case == "bad_version":
        numpy_write_shard(shard, toks, 20240520, "<u2", version=3)
    elif case == "truncated":
        numpy_write_shard(shard, toks, 20240520, "<u2", count=60)
    elif case == "trailing":
        numpy_write_shard(shard, toks, 20240520, "<u2", extra=b"\0\0")
    else:
        shard.write_bytes(b"\0" * 100)
    r = run_tool("read-shard", shard, check=False)
    assert r.returncode == 1
    assert str(shard) in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr
