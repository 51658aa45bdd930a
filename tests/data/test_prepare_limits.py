"""`vtrain prepare` never holds a document longer than --max-document-bytes (issue 25, item 11):
a gzip bomb (a small .gz file expanding to one huge text document) and a giant JSON record are
bad records: refused naming the file (and line), the flag and the limit, leaving --out as it was;
with --on-bad-record skip left out and counted, the other documents kept. The process's peak
memory stays far below the document's size either way (the bytes are read past, not held)."""
import gzip
import json
import os
import resource
import subprocess
import sys

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
BOMB_BYTES = 300 << 20   # the document inside the bomb
LIMIT = 1 << 20          # --max-document-bytes in these tests


def prepare_peak(args):
    """Runs `vtrain prepare` in a child of a fresh python, returning (rc, stderr, peak RSS MiB
    of vtrain alone)."""
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stderr.write(r.stderr)\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
            "print(r.returncode, peak)\n")
    p = subprocess.run([sys.executable, "-c", code, VTRAIN, "prepare", *map(str, args)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    rc, peak = p.stdout.split()
    return int(rc), p.stderr, float(peak)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    d = tmp_path_factory.mktemp("bomb")
    path = d / "bomb.txt.gz"
    chunk = b"a" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(BOMB_BYTES >> 20):
            f.write(chunk)
    assert path.stat().st_size < 2 << 20  # a small file on disk
    (d / "ok.txt").write_text("In the beginning God created the heaven and the earth.\n" * 50)
    return d


def test_a_gzip_bomb_is_refused_without_being_held(bomb, tmp_path):
    out = tmp_path / "out"
    rc, err, peak = prepare_peak(["--input", bomb / "bomb.txt.gz", "--input", bomb / "ok.txt",
                                  "--out", out, "--tokenizer", "bytes", "--format", "text",
                                  "--max-document-bytes", LIMIT, "--quiet"])
    assert rc == 2, err
    assert "bomb.txt.gz" in err and f"--max-document-bytes {LIMIT}" in err, err
    assert not out.exists()
    assert peak < 150, peak  # MiB; the document is 300 MiB


def test_a_gzip_bomb_is_left_out_with_skip(bomb, tmp_path):
    out = tmp_path / "out"
    rc, err, peak = prepare_peak(["--input", bomb / "bomb.txt.gz", "--input", bomb / "ok.txt",
                                  "--out", out, "--tokenizer", "bytes", "--format", "text",
                                  "--max-document-bytes", LIMIT, "--on-bad-record", "skip",
                                  "--quiet"])
    assert rc == 0, err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["documents"] == 1 and meta["skipped_records"] == 1, meta
    assert peak < 150, peak


def test_a_giant_json_record_is_a_bad_record(tmp_path):
    src = tmp_path / "c.jsonl"
    with open(src, "w") as f:
        f.write(json.dumps({"text": "first document"}) + "\n")
        f.write(json.dumps({"text": "x" * (3 * LIMIT)}) + "\n")
        f.write(json.dumps({"text": "third document"}) + "\n")
    out = tmp_path / "out"
    base = ["--input", src, "--out", out, "--tokenizer", "bytes", "--max-document-bytes", LIMIT,
            "--quiet"]
    rc, err, _ = prepare_peak(base)
    assert rc == 2 and f"c.jsonl:2: the record is longer than --max-document-bytes {LIMIT}" in err, err
    assert not out.exists()
    rc, err, _ = prepare_peak(base + ["--on-bad-record", "skip"])
    assert rc == 0, err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["documents"] == 2 and meta["skipped_records"] == 1, meta


def test_the_limit_is_a_declared_flag_range(tmp_path):
    r = subprocess.run([VTRAIN, "prepare", "--input", tmp_path, "--out", tmp_path / "o",
                        "--tokenizer", "bytes", "--max-document-bytes", "10"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--max-document-bytes" in r.stderr, r.stderr
