"""`vtrain prepare` on corpora as they are distributed: JSON lines (a text field per record) plain,
gzip and zstd compressed, through globs, directories and stdin; byte ranges of large files;
mpirun splitting the work with byte-identical output; the document shuffle; the tokenizer sample;
and bad records (named with file and line, skipped or refused, nothing half-written).
The expected token stream is rebuilt here from the records (bytes tokenizer: <|bos|> + UTF-8)."""
import gzip
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

BUILD = Path(os.environ.get("VTRAIN_BUILD", Path(__file__).resolve().parents[2] / "build"))
VTRAIN = BUILD / "vtrain"
DATA_TOOL = BUILD / "data_tool"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
BOS = 256  # the bytes tokenizer's <|bos|>


def prepare(*args, ok=True, np_=1, stdin=None):
    cmd = [str(VTRAIN), "prepare", *map(str, args)]
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(np_), *cmd]
    r = subprocess.run(cmd, capture_output=True, input=stdin, env=ENV, timeout=300)
    r.stdout, r.stderr = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
    return r


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    dtype = {20240520: "<u2", 20240801: "<u4"}[int(header[0])]
    toks = np.fromfile(path, dtype=dtype, offset=1024)
    assert len(toks) == header[2]
    return toks.astype(np.int64)


def stream_of(out):
    meta = json.loads((out / "meta.json").read_text())
    parts = [read_shard(out / s) for s in meta["train"]["shards"] + meta["val"]["shards"]]
    return np.concatenate(parts), meta


def expected_stream(docs):
    s = []
    for d in docs:
        s.append(BOS)
        s.extend(d.encode("utf-8"))
    return np.array(s, dtype=np.int64)


def split_docs(stream):
    """Documents (as byte strings) of a bytes-tokenizer stream."""
    cuts = np.flatnonzero(stream == BOS)
    return [bytes(stream[a + 1:b].astype(np.uint8)) for a, b in zip(cuts, list(cuts[1:]) + [len(stream)])]


def make_docs(rng, n, tag):
    words = ["the", "of", "Bank", "values", "ünïcode", "漢字", "😀", "x=3.14;", "\n", "  ", "tab\t"]
    return [f"{tag}{i}: " + " ".join(rng.choice(words, size=int(rng.integers(1, 40)))) for i in range(n)]


def write_jsonl(path, docs, field="text", opener=open):
    with opener(path, "wt", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, field: d, "meta": {"n": i}}, ensure_ascii=bool(i % 2)) + "\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(1)
    docs = {}
    (d / "shards").mkdir()
    for k in range(3):
        docs[f"shards/part_{k}.jsonl"] = make_docs(rng, 60 + 7 * k, f"p{k}_")
        write_jsonl(d / f"shards/part_{k}.jsonl", docs[f"shards/part_{k}.jsonl"])
    docs["z.jsonl.gz"] = make_docs(rng, 50, "gz")
    write_jsonl(d / "z.jsonl.gz", docs["z.jsonl.gz"], opener=gzip.open)
    docs["y.jsonl.zst"] = make_docs(rng, 40, "zst")
    write_jsonl(d / "y.jsonl", docs["y.jsonl.zst"])
    subprocess.run(["zstd", "-q", "--rm", str(d / "y.jsonl")], check=True)
    docs["notes.txt"] = ["a plain text file is one document\nwith two lines\n"]
    (d / "notes.txt").write_text(docs["notes.txt"][0])
    # Input order: a glob, a compressed file, a directory (sorted), a text file.
    inputs = [str(d / "shards/part_*.jsonl"), d / "y.jsonl.zst", d / "gzdir", d / "notes.txt"]
    (d / "gzdir").mkdir()
    os.rename(d / "z.jsonl.gz", d / "gzdir" / "z.jsonl.gz")
    order = [f"shards/part_{k}.jsonl" for k in range(3)] + ["y.jsonl.zst", "z.jsonl.gz", "notes.txt"]
    all_docs = [x for name in order for x in docs[name]]
    return d, inputs, all_docs


def test_jsonl_compressed_globs_dirs(corpus, tmp_path):
    d, inputs, docs = corpus
    out = tmp_path / "out"
    r = prepare("--input", *inputs, "--out", out, "--tokenizer", "bytes", "--val-fraction", "0.1",
                "--shard-tokens", "5000")
    assert "prepare:" in r.stdout
    stream, meta = stream_of(out)
    np.testing.assert_array_equal(stream, expected_stream(docs))
    assert meta["documents"] == len(docs) and meta["skipped_records"] == 0
    assert meta["val"]["tokens"] == max(2, math.ceil(0.1 * len(stream)))
    assert len(meta["inputs"]) == 6 and meta["inputs"][3].endswith("y.jsonl.zst")
    assert not Path(str(out) + ".prepare-tmp").exists()


def test_concatenated_gzip_members_and_zstd_frames(tmp_path):
    a, b = ["first member"] * 3, ["second ünïcode member"] * 2
    write_jsonl(tmp_path / "a.jsonl", a)
    write_jsonl(tmp_path / "b.jsonl", b)
    raw_a, raw_b = (tmp_path / "a.jsonl").read_bytes(), (tmp_path / "b.jsonl").read_bytes()
    (tmp_path / "cat.jsonl.gz").write_bytes(gzip.compress(raw_a) + gzip.compress(raw_b))
    zst = [subprocess.run(["zstd", "-q", "-c"], input=r, capture_output=True, check=True).stdout for r in (raw_a, raw_b)]
    (tmp_path / "cat.jsonl.zst").write_bytes(zst[0] + zst[1])
    for name in ["cat.jsonl.gz", "cat.jsonl.zst"]:
        out = tmp_path / ("o_" + name)
        prepare("--input", tmp_path / name, "--out", out, "--tokenizer", "bytes", "--val-fraction", "0", "--quiet")
        assert split_docs(stream_of(out)[0]) == [x.encode() for x in a + b], name


def test_byte_ranges_and_stdin_give_the_same_stream(corpus, tmp_path):
    d, inputs, docs = corpus
    whole = tmp_path / "whole"
    prepare("--input", *inputs, "--out", whole, "--tokenizer", "bytes", "--quiet")
    cut = tmp_path / "cut"  # plain JSON-lines files cut into ~300-byte units: lines cross the cuts
    prepare("--input", *inputs, "--out", cut, "--tokenizer", "bytes", "--quiet", "--unit-bytes", "300")
    for f in (whole).iterdir():
        if f.name != "meta.json":
            assert f.read_bytes() == (cut / f.name).read_bytes(), f.name
    m1, m2 = (json.loads((x / "meta.json").read_text()) for x in (whole, cut))
    assert m2.pop("unit_bytes") == 300 and m1.pop("unit_bytes") != 300 and m1 == m2
    # stdin: the same records piped (zstd-compressed, told by the magic bytes)
    part = d / "shards/part_1.jsonl"
    piped = tmp_path / "piped"
    prepare("--input", "-", "--out", piped, "--tokenizer", "bytes", "--quiet",
            stdin=subprocess.run(["zstd", "-q", "-c", str(part)], capture_output=True, check=True).stdout)
    direct = tmp_path / "direct"
    prepare("--input", part, "--out", direct, "--tokenizer", "bytes", "--quiet")
    for name in ["train_000000.bin", "val_000000.bin"]:
        assert (piped / name).read_bytes() == (direct / name).read_bytes()
    assert json.loads((piped / "meta.json").read_text())["inputs"] == ["-"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpirun_output_is_byte_identical(corpus, tmp_path, ranks):
    d, inputs, docs = corpus
    common = ["--input", *inputs, "--tokenizer", "bpe:300", "--shuffle-seed", "11", "--shard-tokens",
              "3000", "--unit-bytes", "700", "--tokenizer-sample-bytes", "20000", "--quiet"]
    one, many = tmp_path / "one", tmp_path / "many"
    prepare(*common, "--out", one)
    prepare(*common, "--out", many, np_=ranks)
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in many.iterdir()) and len(names) > 5
    for name in names:
        assert (one / name).read_bytes() == (many / name).read_bytes(), name


def test_shuffle_is_a_seeded_document_permutation(corpus, tmp_path):
    d, inputs, docs = corpus
    runs = {}
    for name, seed in [("a", 5), ("b", 5), ("c", 6), ("plain", 0)]:
        prepare("--input", *inputs, "--out", tmp_path / name, "--tokenizer", "bytes", "--quiet",
                "--shuffle-seed", seed, "--val-fraction", "0")
        runs[name] = split_docs(stream_of(tmp_path / name)[0])
    want = [x.encode() for x in docs]
    assert runs["plain"] == want
    assert runs["a"] == runs["b"]
    for name in "ac":
        assert sorted(runs[name]) == sorted(want) and runs[name] != want
    assert runs["a"] != runs["c"]
    # no document keeps its neighbour much more often than chance
    pos = {x: i for i, x in enumerate(runs["a"])}
    kept = sum(pos[want[i + 1]] == pos[want[i]] + 1 for i in range(len(want) - 1))
    assert kept < 10


def test_tokenizer_sample(corpus, tmp_path):
    """bpe:N trains on each unit's leading documents up to its share of the sample: the same
    tokenizer as data_tool train-bpe on exactly those documents (one file each)."""
    d, inputs, docs = corpus
    files = [d / f"shards/part_{k}.jsonl" for k in range(3)]
    sample = 6000
    out = tmp_path / "out"
    prepare("--input", *files, "--out", out, "--tokenizer", "bpe:320", "--quiet",
            "--tokenizer-sample-bytes", sample)
    sizes = [f.stat().st_size for f in files]
    picked = []
    for f, size in zip(files, sizes):
        budget = math.ceil(sample * size / sum(sizes))
        taken = 0
        for line in f.read_text(encoding="utf-8").splitlines():
            if taken >= budget:
                break
            t = json.loads(line)["text"]
            picked.append(t)
            taken += len(t.encode())
    assert len(picked) < len(docs) / 2  # a real sample, not everything
    paths = []
    for i, t in enumerate(picked):
        p = tmp_path / f"s{i}.txt"
        p.write_bytes(t.encode())
        paths.append(p)
    ref = tmp_path / "ref.json"
    subprocess.run([str(DATA_TOOL), "train-bpe", "--input", *map(str, paths), "--vocab", "320", "--out",
                    str(ref), "--quiet"], check=True, capture_output=True)
    assert json.loads((out / "tokenizer.json").read_text())["tokens"] == json.loads(ref.read_text())["tokens"]


GOOD = [json.dumps({"text": f"good record {i}"}) for i in range(6)]


def bad_cases(tmp):
    """(name, file, line of the bad record, words the message must hold, documents kept on skip)."""
    cases = []

    def jsonl(name, lines, bad_line, words, kept, tail="\n"):
        p = tmp / name
        p.write_bytes(("\n".join(lines) + tail).encode() if isinstance(lines[0], str) else b"\n".join(lines) + b"\n")
        cases.append((name, p, bad_line, words, kept))

    jsonl("missing.jsonl", GOOD[:2] + ['{"body": "no text here"}'] + GOOD[2:], 3, ['no "text" field'], 6)
    jsonl("number.jsonl", GOOD[:4] + ['{"text": 42}'] + GOOD[4:], 5, ['"text" field is a number'], 6)
    jsonl("array.jsonl", GOOD[:1] + ['["text"]'] + GOOD[1:], 2, ["not a JSON object"], 6)
    jsonl("truncated.jsonl", GOOD + ['{"text": "cut of'], 7, ["truncated JSON record"], 6, tail="")
    jsonl("badutf8.jsonl", [g.encode() for g in GOOD[:3]] + [b'{"text": "caf\xe9 latin-1"}'] +
          [g.encode() for g in GOOD[3:]], 4, ["UTF-8"], 6)
    jsonl("surrogate.jsonl", GOOD[:5] + ['{"text": "lone \\ud800 surrogate"}'] + GOOD[5:], 6, ["surrogate"], 6)
    # compressed streams damaged in the middle / cut short: the records before stay on skip
    big = [json.dumps({"text": f"record {i} " + "z" * (i % 50)}) for i in range(4000)]
    raw = ("\n".join(big) + "\n").encode()
    gz = gzip.compress(raw)
    (tmp / "trunc.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    cases.append(("trunc.jsonl.gz", tmp / "trunc.jsonl.gz", None, ["truncated gzip stream"], None))
    damaged = bytearray(gz)
    for i in range(len(gz) // 2, len(gz) // 2 + 64):
        damaged[i] ^= 0x5A
    (tmp / "corrupt.jsonl.gz").write_bytes(bytes(damaged))
    cases.append(("corrupt.jsonl.gz", tmp / "corrupt.jsonl.gz", None, ["gzip stream"], None))
    zst = subprocess.run(["zstd", "-q", "-c"], input=raw, capture_output=True, check=True).stdout
    damaged = bytearray(zst)
    for i in range(len(zst) // 2, len(zst) // 2 + 64):
        damaged[i] ^= 0x5A
    (tmp / "corrupt.jsonl.zst").write_bytes(bytes(damaged))
    cases.append(("corrupt.jsonl.zst", tmp / "corrupt.jsonl.zst", None, ["zstd stream"], None))
    (tmp / "fake.jsonl.gz").write_bytes(raw[:1000])
    cases.append(("fake.jsonl.gz", tmp / "fake.jsonl.gz", None, ["not a gzip stream"], 0))
    return cases


def test_bad_records_fail_name_file_and_line_and_leave_out_untouched(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(GOOD) + "\n")
    out = tmp_path / "out"
    prepare("--input", good, "--out", out, "--tokenizer", "bytes", "--quiet")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for name, path, line, words, _ in bad_cases(tmp_path):
        r = prepare("--input", good, path, "--out", out, "--tokenizer", "bytes", "--quiet", ok=False)
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        where = f"{path}:{line}" if line else str(path)
        assert where in r.stderr and "--on-bad-record skip" in r.stderr or name == "fake.jsonl.gz", (name, r.stderr)
        for w in words:
            assert w in r.stderr, (name, w, r.stderr)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before, name
        assert not Path(str(out) + ".prepare-tmp").exists()
        # under mpirun too: one message, same refusal
        r = prepare("--input", good, path, "--out", tmp_path / "never", "--tokenizer", "bytes", "--quiet",
                    "--unit-bytes", "100", ok=False, np_=2)
        assert r.returncode == 2 and r.stderr.count("error:") == 1 and words[0] in r.stderr, (name, r.stderr)
        assert not (tmp_path / "never").exists() and not (tmp_path / "never.prepare-tmp").exists()


def test_bad_records_skip(tmp_path):
    other = [f"other document {i}" for i in range(3)]
    write_jsonl(tmp_path / "other.jsonl", other)
    for name, path, line, words, kept in bad_cases(tmp_path):
        if name == "fake.jsonl.gz":
            continue  # not a stream at all: refused in either mode
        out = tmp_path / ("o_" + name)
        r = prepare("--input", path, tmp_path / "other.jsonl", "--out", out, "--tokenizer", "bytes",
                    "--val-fraction", "0", "--on-bad-record", "skip")
        assert "warning" in r.stderr and words[0] in r.stderr, (name, r.stderr)
        stream, meta = stream_of(out)
        got = split_docs(stream)
        if kept is not None:  # the good records of the file, in order, then the other file
            assert meta["skipped_records"] == 1 and meta["skipped_files"] == 0
            assert got == [json.loads(g)["text"].encode() for g in GOOD] + [o.encode() for o in other], name
        else:  # a damaged stream: the whole file is left out, the other file is untouched
            assert meta["skipped_records"] == 0 and meta["skipped_files"] == 1
            assert got == [o.encode() for o in other], name
