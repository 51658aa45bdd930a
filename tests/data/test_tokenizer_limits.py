"""Tokenizer files from others are checked (issue 25, judgement calls): a tokenizer.json whose
merges repeat a pair or a result is refused naming both merges; a .tiktoken ranks file whose gaps
would leave most ids unused (each an embedding row and a logit) is refused, a small gap is not;
a pre-tokenizer pattern that backtracks catastrophically is bounded per byte by PCRE2's match
limit and still never drops a byte (the text round-trips)."""
import base64
import json

import pytest

from conftest import run_tool


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("toklim")
    (d / "c.txt").write_text("the quick brown fox jumps over the lazy dog. " * 400)
    run_tool("train-bpe", "--input", d / "c.txt", "--vocab", 300, "--out", d / "tok.json")
    return json.loads((d / "tok.json").read_text())


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def encode(tok, tmp_path, text="the lazy dog"):
    (tmp_path / "in.txt").write_text(text)
    return run_tool("encode", "--tokenizer", tok, "--input", tmp_path / "in.txt", check=False)


def test_the_trained_tokenizer_loads(bpe_json, tmp_path):
    assert len(bpe_json["merges"]) > 10
    assert encode(write(tmp_path, "ok.json", bpe_json), tmp_path).returncode == 0


@pytest.mark.parametrize("what", ["pair", "result"])
def test_repeated_merges_are_refused(bpe_json, tmp_path, what):
    j = json.loads(json.dumps(bpe_json))
    m0 = j["merges"][0]
    if what == "pair":
        j["merges"].append(list(m0))
    else:  # another pair claiming the same result
        other = j["merges"][1]
        j["merges"][1] = [other[0], other[1], m0[2]]
    r = encode(write(tmp_path, "dup.json", j), tmp_path)
    assert r.returncode != 0
    assert f"repeats merge" in r.stderr and f"'s {what}" in r.stderr, r.stderr


def ranks_file(tmp_path, extra_ranks):
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    for i, r in enumerate(extra_ranks):
        lines.append(f"{base64.b64encode(bytes([65, 66 + i])).decode()} {r}")
    p = tmp_path / "r.tiktoken"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_tiktoken_gaps_that_inflate_the_vocabulary_are_refused(tmp_path):
    r = encode(f"tiktoken:{ranks_file(tmp_path, [25600])}", tmp_path)
    assert r.returncode != 0 and "ranks up to 25600 hold only 257 tokens" in r.stderr, r.stderr
    r = encode(f"tiktoken:{ranks_file(tmp_path, [300, 301])}", tmp_path)  # 44 unused ids
    assert r.returncode == 0, r.stderr


def test_a_catastrophic_pattern_is_bounded_and_drops_no_byte(bpe_json, tmp_path):
    j = json.loads(json.dumps(bpe_json))
    j["pattern"] = r"(a+)+$"  # exponential backtracking on a run of a's not at the end
    tok = write(tmp_path, "slow.json", j)
    text = "a" * 40 + "!" + " the lazy dog"
    r = encode(tok, tmp_path, text)
    assert r.returncode == 0, r.stderr
    (tmp_path / "ids.txt").write_text(r.stdout)
    run_tool("decode", "--tokenizer", tok, "--ids", tmp_path / "ids.txt", "--out",
             tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == text
