"""The BPE trainer and encoder against an independent pure-Python BPE.

Python's `re` has no \\p{L}, so the exact comparison uses a corpus of lowercase ASCII words, single
spaces and '.'/',' runs, on which the cl100k split reduces to ` ?[a-z]+|[.,]+`. On that corpus the
naive trainer below (recount every pair each step, most frequent wins, ties to the lowest (left,
right); bytes that already form a token reuse its id) must give exactly vtrain's merges, and the
tiktoken rule (merge the adjacent pair whose concatenation has the lowest rank) exactly its ids.
Arbitrary bytes and a real corpus (the King James Bible when `bible` is installed) check the
invariants: decode(encode(x)) == x and merges consistent with the token bytes."""
import base64
import json
import random
import re
import shutil
import subprocess
from collections import Counter

import pytest

from conftest import run_tool


def make_corpus(seed, n_words):
    rnd = random.Random(seed)
    syll = ["ka", "lo", "mi", "ne", "sa", "tor", "in", "the", "a", "ru", "bel", "os"]
    vocab = ["".join(rnd.choice(syll) for _ in range(rnd.randint(1, 4))) for _ in range(300)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf-like
    words = rnd.choices(vocab, weights, k=n_words)
    text = []
    for i, w in enumerate(words):
        text.append(w)
        r = rnd.random()
        if r < 0.08:
            text.append(".")
        elif r < 0.12:
            text.append(",")
        elif r < 0.125:
            text.append("..")
        if i + 1 < len(words):
            text.append(" ")
    return "".join(text)


def py_chunks(text):
    chunks = re.findall(r" ?[a-z]+|[.,]+", text)
    assert "".join(chunks) == text
    return chunks


def py_train(text, vocab_size):
    counts = Counter(py_chunks(text))
    words = [[list(c.encode()), n] for c, n in sorted(counts.items())]
    tokens = [bytes([i]) for i in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    merges = []
    while len(tokens) < vocab_size - 1:  # one special (<|bos|>)
        pc = Counter()
        for syms, n in words:
            for p in zip(syms, syms[1:]):
                pc[p] += n
        if not pc:
            break
        (a, b), _ = min(pc.items(), key=lambda kv: (-kv[1], kv[0]))
        mb = tokens[a] + tokens[b]
        nid = index.get(mb)
        if nid is None:
            nid = len(tokens)
            tokens.append(mb)
            index[mb] = nid
        merges.append([a, b, nid])
        for w in words:
            s, out, i = w[0], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(nid)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            w[0] = out
    return tokens, merges


def py_encode_chunk(b, ranks):
    if b in ranks:
        return [ranks[b]]
    parts = [bytes([x]) for x in b]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[p] for p in parts]


def load_tok(path):
    j = json.loads(path.read_text())
    assert j["format"] == "vtrain-tokenizer" and j["version"] == 1
    tokens = [base64.b64decode(t) for t in j["tokens"]]
    return j, tokens


def check_invariants(j, tokens):
    assert tokens[:256] == [bytes([i]) for i in range(256)]
    assert len(set(tokens)) == len(tokens), "token bytes must be unique"
    assert j["specials"] == {"<|bos|>": len(tokens)}
    created = 256
    for a, b, r in j["merges"]:
        assert tokens[r] == tokens[a] + tokens[b]
        if r == created:  # a new token: built from tokens that existed before it
            assert a < r and b < r
            created += 1
        else:
            assert r < created, "a merge may only reuse an existing token"
    assert created == len(tokens), "every token above 255 comes from a merge, in id order"


def roundtrip(tmp_path, tok, data, name):
    src = tmp_path / f"{name}.in"
    src.write_bytes(data)
    ids = run_tool("encode", "--tokenizer", tok, "--input", src).stdout.split()
    (tmp_path / f"{name}.ids").write_text(" ".join(ids))
    run_tool("decode", "--tokenizer", tok, "--ids", tmp_path / f"{name}.ids", "--out", tmp_path / f"{name}.out")
    assert (tmp_path / f"{name}.out").read_bytes() == data
    return [int(x) for x in ids]


@pytest.mark.parametrize("seed,n_words,vocab", [(1, 3000, 400), (2, 800, 330)])
def test_merges_match_naive_python_bpe(tmp_path, seed, n_words, vocab):
    text = make_corpus(seed, n_words)
    (tmp_path / "c.txt").write_text(text)
    run_tool("train-bpe", "--input", tmp_path / "c.txt", "--vocab", vocab, "--out", tmp_path / "tok.json", "--quiet")
    j, tokens = load_tok(tmp_path / "tok.json")
    py_tokens, py_merges = py_train(text, vocab)
    assert j["merges"] == py_merges
    assert tokens == py_tokens
    assert len(tokens) + 1 == vocab
    check_invariants(j, tokens)

    # Encoding held-out text of the same form: the tiktoken rule in Python gives the same ids.
    held = make_corpus(seed + 100, 500)
    ranks = {t: i for i, t in enumerate(tokens)}
    expect = [i for c in py_chunks(held) for i in py_encode_chunk(c.encode(), ranks)]
    assert roundtrip(tmp_path, tmp_path / "tok.json", held.encode(), "held") == expect
    assert len(expect) < len(held) / 2


def test_arbitrary_bytes_roundtrip_and_invariants(tmp_path):
    rnd = random.Random(5)
    pieces = [b"the", b" fox", b"  ", b"\n", b"\r\n", b"\t", b"\0", "\U0001F600".encode(), "\u20ac".encode(),
              "caf\u00e9".encode(), b"123", b"'s", b".", b"\xff", b"\xc3", b"\x80\x80", b"\xed\xa0\x80", b" " * 40]
    def sample(n):
        out = bytearray()
        while len(out) < n:
            out += bytes([rnd.randrange(256)]) if rnd.random() < 0.3 else rnd.choice(pieces)
        return bytes(out)
    (tmp_path / "corpus.bin").write_bytes(sample(30000))
    run_tool("train-bpe", "--input", tmp_path / "corpus.bin", "--vocab", 700, "--out", tmp_path / "tok.json", "--quiet")
    j, tokens = load_tok(tmp_path / "tok.json")
    check_invariants(j, tokens)
    for k in range(5):
        ids = roundtrip(tmp_path, tmp_path / "tok.json", sample(2000 + 500 * k), f"r{k}")
        assert all(0 <= i < len(tokens) for i in ids)
    roundtrip(tmp_path, tmp_path / "tok.json", bytes(range(256)) * 3, "allbytes")
    roundtrip(tmp_path, "bytes", sample(3000), "bytes_tok")


@pytest.mark.skipif(shutil.which("bible") is None, reason="the bible-kjv package is not installed")
def test_king_james_bible_bpe4096(tmp_path):
    text = subprocess.run(["bible", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout
    assert len(text) > 4_000_000
    (tmp_path / "kjv.txt").write_bytes(text)
    info = json.loads(run_tool("train-bpe", "--input", tmp_path / "kjv.txt", "--vocab", 4096,
                               "--out", tmp_path / "tok.json", "--quiet").stdout)
    print("bpe:4096 on the KJV:", info)
    assert info["vocab_size"] == 4096
    j, tokens = load_tok(tmp_path / "tok.json")
    check_invariants(j, tokens)
    ids = roundtrip(tmp_path, tmp_path / "tok.json", text, "kjv")
    assert len(text) / len(ids) > 3.0, "bpe:4096 should compress English to > 3 bytes per token"
