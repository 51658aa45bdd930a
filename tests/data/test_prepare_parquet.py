"""`vtrain prepare` on Parquet shards written by pyarrow (issue 42, item 4): FineWeb-Edu-style
files (a `text` column among id, url, score, ...) and nanochat-style ones (`text` only), SNAPPY,
ZSTD, GZIP and uncompressed pages, several row groups and pages, dictionary and PLAIN values (and
a dictionary that falls back to PLAIN mid-chunk), data pages v1 and v2, page checksums, nullable
columns with nulls. Each prepares to the same shard bytes and tokenizer as the JSONL of the same
texts, and to the bytes tokenizer's stream of those texts. Bad files are refused naming the file
and what is wrong: a missing or non-string column, a truncated file, a corrupt footer length, a
file that is not Parquet, a page failing its checksum, codecs and encodings the reader lacks."""
import gzip
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BUILD = Path(os.environ.get("VTRAIN_BUILD", Path(__file__).resolve().parents[2] / "build"))
VTRAIN = BUILD / "vtrain"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
BOS = 256  # the bytes tokenizer's <|bos|>


def prepare(*args, ok=True, np_=1):
    cmd = [str(VTRAIN), "prepare", *map(str, args)]
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(np_), *cmd]
    r = subprocess.run(cmd, capture_output=True, env=ENV, timeout=300)
    r.stdout, r.stderr = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
    return r


def refused(*args):
    r = prepare(*args, ok=False)
    assert r.returncode != 0, f"prepare {args} should have failed:\n{r.stdout}\n{r.stderr}"
    return r.stderr


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    dtype = {20240520: "<u2", 20240801: "<u4"}[int(header[0])]
    return np.fromfile(path, dtype=dtype, offset=1024).astype(np.int64)


def stream_of(out):
    meta = json.loads((out / "meta.json").read_text())
    return np.concatenate([read_shard(out / s) for s in meta["train"]["shards"] + meta["val"]["shards"]]), meta


def expected_stream(docs):
    s = []
    for d in docs:
        s.append(BOS)
        s.extend(d.encode("utf-8"))
    return np.array(s, dtype=np.int64)


def data_files(out):
    """The data directory's files that depend on the text only (meta.json names the inputs)."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "meta.json"}


def make_docs(rng, n, tag):
    words = ["the", "of", "Bank", "values", "ünïcode", "漢字", "😀", "x=3.14;", "\n", "  ", "tab\t", ""]
    docs = [f"{tag}{i}: " + " ".join(rng.choice(words, size=int(rng.integers(0, 60)))) for i in range(n)]
    docs[3] = docs[5] = "a repeated document"  # dictionary pages have something to share
    docs[7] = ""
    return docs


def fineweb_table(docs, text_type=pa.string()):
    """FineWeb-Edu's columns (text among them, not first)."""
    n = len(docs)
    return pa.table({
        "id": [f"<urn:uuid:{i:08x}>" for i in range(n)],
        "text": pa.array(docs, type=text_type),
        "dump": ["CC-MAIN-2024-10"] * n,
        "url": [f"https://example.org/{i}" for i in range(n)],
        "language": ["en"] * n,
        "language_score": np.linspace(0.5, 1.0, n),
        "token_count": pa.array(np.arange(n) * 7, type=pa.int64()),
        "score": np.linspace(2.5, 4.5, n),
        "int_score": pa.array(np.arange(n) % 5, type=pa.int64()),
    })


def nanochat_table(docs, text_type=pa.string(), nullable=True):
    return pa.table({"text": pa.array(docs, type=text_type)},
                    schema=pa.schema([pa.field("text", text_type, nullable=nullable)]))


def write_jsonl(path, docs, field="text"):
    with open(path, "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, field: d}) + "\n")


def text_encodings(path):
    """Per row group, the encodings of the text column's chunk (as the footer lists them)."""
    md = pq.ParquetFile(path).metadata
    col = md.schema.names.index("text")
    return [set(md.row_group(g).column(col).encodings) for g in range(md.num_row_groups)]


VARIANTS = {
    # name: (table maker, pyarrow.parquet.write_table options)
    "fineweb-snappy-dict-v1": (fineweb_table, dict(compression="snappy", row_group_size=17)),
    "nanochat-zstd-dict-v2": (nanochat_table, dict(compression="zstd", data_page_version="2.0",
                                                   row_group_size=25, data_page_size=512)),
    "fineweb-gzip-plain": (fineweb_table, dict(compression="gzip", use_dictionary=False, row_group_size=30)),
    "nanochat-none-plain-v2": (nanochat_table, dict(compression="none", use_dictionary=False,
                                                    data_page_version="2.0", data_page_size=300,
                                                    row_group_size=40)),
    "snappy-dictionary-falls-back-to-plain": (fineweb_table, dict(
        compression="snappy", dictionary_pagesize_limit=400, data_page_size=200, row_group_size=50)),
    "zstd-checksums-large-string-required": (
        lambda docs: nanochat_table(docs, pa.large_string(), nullable=False),
        dict(compression="zstd", write_page_checksum=True, row_group_size=20)),
}


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(42)
    return [make_docs(rng, 70, "a"), make_docs(rng, 45, "b")]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parquet_prepares_to_the_tokens_of_its_jsonl(variant, docs, tmp_path):
    table_of, options = VARIANTS[variant]
    (tmp_path / "shards").mkdir()
    (tmp_path / "jsonl").mkdir()
    for k, part in enumerate(docs):
        pq.write_table(table_of(part), tmp_path / f"shards/part_{k}.parquet", **options)
        write_jsonl(tmp_path / f"jsonl/part_{k}.jsonl", part)
    # The files hold what the variant is about.
    enc = text_encodings(tmp_path / "shards/part_0.parquet")
    assert len(enc) > 1, "several row groups"
    dictionary = options.get("use_dictionary", True)
    assert all(("RLE_DICTIONARY" in e) == dictionary for e in enc), enc
    if "falls-back" in variant:  # the footer does not tell page by page: the dictionary cannot hold a row group
        assert len("".join(set(docs[0][:50])).encode()) > 4 * options["dictionary_pagesize_limit"]
    all_docs = docs[0] + docs[1]
    for tok in ["bytes", "bpe:300"]:
        pq_out, js_out = tmp_path / f"pq_{tok}", tmp_path / f"js_{tok}"
        common = ["--tokenizer", tok, "--val-fraction", "0.1", "--shard-tokens", "4000", "--quiet"]
        prepare("--input", tmp_path / "shards/*.parquet", "--out", pq_out, *common)
        prepare("--input", tmp_path / "jsonl/*.jsonl", "--out", js_out, *common)
        pq_files, js_files = data_files(pq_out), data_files(js_out)
        assert sorted(pq_files) == sorted(js_files)
        for name in js_files:
            assert pq_files[name] == js_files[name], f"{variant} {tok}: {name} differs from the JSONL's"
        stream, meta = stream_of(pq_out)
        assert meta["documents"] == len(all_docs) and meta["skipped_records"] == 0
        if tok == "bytes":
            np.testing.assert_array_equal(stream, expected_stream(all_docs))


def test_nulls_are_bad_records_named_by_row(docs, tmp_path):
    texts = list(docs[0])
    for i in (4, 30, 31, 69):
        texts[i] = None
    path = tmp_path / "nulls.parquet"
    pq.write_table(nanochat_table(texts), path, row_group_size=20)
    err = refused("--input", path, "--out", tmp_path / "o", "--tokenizer", "bytes", "--quiet")
    assert f"{path}: row 5 (row group 1 of 4): the \"text\" value is null" in err, err
    assert "--on-bad-record skip" in err
    assert not (tmp_path / "o").exists()
    r = prepare("--input", path, "--out", tmp_path / "s", "--tokenizer", "bytes", "--quiet",
                "--on-bad-record", "skip", "--val-fraction", "0")
    assert f"{path}: row 32 (row group 2 of 4)" in r.stderr, r.stderr
    stream, meta = stream_of(tmp_path / "s")
    kept = [t for t in texts if t is not None]
    np.testing.assert_array_equal(stream, expected_stream(kept))
    assert meta["skipped_records"] == 4 and meta["documents"] == len(kept)


def test_long_documents_and_pages_past_the_memory_bound(tmp_path):
    path = tmp_path / "long.parquet"
    pq.write_table(nanochat_table(["short", "x" * 5000, "after"]), path)
    err = refused("--input", path, "--out", tmp_path / "o", "--tokenizer", "bytes", "--max-document-bytes", 1024)
    assert f"{path}: row 2 (row group 1 of 1): the document is longer than --max-document-bytes 1024" in err, err
    prepare("--input", path, "--out", tmp_path / "s", "--tokenizer", "bytes", "--quiet",
            "--max-document-bytes", 1024, "--on-bad-record", "skip", "--val-fraction", "0")
    np.testing.assert_array_equal(stream_of(tmp_path / "s")[0], expected_stream(["short", "after"]))
    # A page is held whole: one over --max-document-bytes + 16 MiB is refused, never read.
    big = tmp_path / "big.parquet"
    pq.write_table(nanochat_table(["y" * (17 << 20)]), big, compression="zstd")
    err = refused("--input", big, "--out", tmp_path / "b", "--tokenizer", "bytes", "--max-document-bytes", 1024)
    assert str(big) in err and "bytes this reader holds" in err and "raise --max-document-bytes" in err, err


def test_missing_and_non_string_columns_are_refused_by_name(docs, tmp_path):
    part = docs[1]
    content = tmp_path / "content.parquet"
    pq.write_table(pa.table({"id": list(range(len(part))), "content": part}), content)
    err = refused("--input", content, "--out", tmp_path / "o", "--tokenizer", "bytes")
    assert f"{content}: no top-level column \"text\" (the file's columns: id, content)" in err, err
    assert "--text-field" in err
    # --text-field picks the column, as it picks a JSON field.
    write_jsonl(tmp_path / "content.jsonl", part, field="content")
    prepare("--input", content, "--out", tmp_path / "p", "--tokenizer", "bytes", "--text-field", "content", "--quiet")
    prepare("--input", tmp_path / "content.jsonl", "--out", tmp_path / "j", "--tokenizer", "bytes",
            "--text-field", "content", "--quiet")
    assert data_files(tmp_path / "p") == data_files(tmp_path / "j")
    cases = {
        "ints": (pa.array(range(3), type=pa.int64()), "holds INT64 values, not strings"),
        "floats": (pa.array([0.5, 1.5, 2.5]), "holds DOUBLE values, not strings"),
        "binary": (pa.array([b"a", b"b", b"c"], type=pa.binary()), "is binary (BYTE_ARRAY without"),
        "lists": (pa.array([["a"], ["b", "c"], []]), "is a group"),
        "structs": (pa.array([{"t": "a"}, {"t": "b"}, {"t": "c"}]), "is a group"),
    }
    for name, (column, why) in cases.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"text": column}), path)
        err = refused("--input", path, "--out", tmp_path / f"o_{name}", "--tokenizer", "bytes")
        assert f"{path}: column \"text\" {why}" in err, (name, err)


def damage(good, tmp_path):
    """Damaged copies of `good` (a parquet file with page checksums): name -> (path, what the
    refusal says)."""
    raw = good.read_bytes()
    footer_len = int.from_bytes(raw[-8:-4], "little")
    out = {}

    def put(name, data, why):
        p = tmp_path / f"{name}.parquet"
        p.write_bytes(data)
        out[name] = (p, why)

    put("truncated", raw[: len(raw) * 3 // 5], "truncated Parquet file")
    put("cut-in-footer", raw[:-3], "truncated Parquet file")
    put("empty", b"", "not a Parquet file (0 bytes")
    put("footer-length", raw[:-8] + (len(raw) * 2).to_bytes(4, "little") + b"PAR1", "corrupt footer length")
    put("not-parquet", b'{"text": "a JSON line in a .parquet file"}\n' * 4, "not a Parquet file")
    put("gzipped", gzip.compress(raw), "a compressed file, not a Parquet file")
    footer = bytearray(raw)
    start = len(raw) - 8 - footer_len
    footer[start : start + footer_len // 2] = b"\xff" * (footer_len // 2)
    put("footer-bytes", bytes(footer), "corrupt footer")
    page = bytearray(raw)
    at = raw.index(b"a repeated document")  # in a page's values (no statistics hold a copy)
    page[at] ^= 0x01
    put("page-crc", bytes(page), "fails its CRC check")
    return out


def test_damaged_files_are_refused_by_name(docs, tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(fineweb_table(docs[0]), good, compression="none", use_dictionary=False,
                   write_page_checksum=True, write_statistics=False, row_group_size=30)
    for name, (path, why) in damage(good, tmp_path).items():
        out = tmp_path / f"o_{name}"
        err = refused("--input", path, "--out", out, "--tokenizer", "bytes")
        assert str(path) in err and why in err, (name, err)
        assert not out.exists(), name
    # A .parquet.gz is a Parquet input too (auto format), refused as compressed, not read as text.
    gz = tmp_path / "good.parquet.gz"
    gz.write_bytes(gzip.compress(good.read_bytes()))
    err = refused("--input", gz, "--out", tmp_path / "o_gz", "--tokenizer", "bytes")
    assert f"{gz}: a compressed file, not a Parquet file" in err, err
    # With --on-bad-record skip a damaged file is left out whole, with a warning naming it.
    bad = tmp_path / "page-crc.parquet"
    r = prepare("--input", good, bad, "--out", tmp_path / "s", "--tokenizer", "bytes", "--quiet",
                "--on-bad-record", "skip", "--val-fraction", "0")
    assert f"{bad}: row group" in r.stderr and "the whole file is left out" in r.stderr, r.stderr
    stream, meta = stream_of(tmp_path / "s")
    np.testing.assert_array_equal(stream, expected_stream(docs[0]))


@pytest.mark.parametrize("options,name", [
    (dict(compression="lz4"), "LZ4_RAW"),
    (dict(compression="brotli"), "BROTLI"),
    (dict(use_dictionary=False, column_encoding={"text": "DELTA_BYTE_ARRAY"}), "DELTA_BYTE_ARRAY"),
    (dict(use_dictionary=False, column_encoding={"text": "DELTA_LENGTH_BYTE_ARRAY"}), "DELTA_LENGTH_BYTE_ARRAY"),
])
def test_codecs_and_encodings_the_reader_lacks_are_named(docs, tmp_path, options, name):
    path = tmp_path / "x.parquet"
    pq.write_table(nanochat_table(docs[1]), path, **options)
    err = refused("--input", path, "--out", tmp_path / "o", "--tokenizer", "bytes", "--on-bad-record", "skip")
    assert str(path) in err and name in err and "not" in err, err


def test_mpirun_splits_parquet_files_with_byte_identical_output(docs, tmp_path):
    rng = np.random.default_rng(7)
    for k in range(3):
        pq.write_table(fineweb_table(make_docs(rng, 40 + 10 * k, f"m{k}_")), tmp_path / f"p{k}.parquet",
                       compression="zstd", row_group_size=16)
    common = ["--input", tmp_path / "p*.parquet", "--tokenizer", "bpe:300", "--shuffle-seed", "3",
              "--shard-tokens", "3000", "--quiet"]
    prepare(*common, "--out", tmp_path / "one")
    prepare(*common, "--out", tmp_path / "two", np_=2)
    assert data_files(tmp_path / "one") == data_files(tmp_path / "two")
