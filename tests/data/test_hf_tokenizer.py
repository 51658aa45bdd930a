"""The Hugging Face form of vtrain's tokenizers (src/data/hf_tokenizer.h; `vtrain export` writes it
as tokenizer.json + tokenizer_config.json; here through `data_tool hf-tokenizer`), loaded with the
`tokenizers` package, must encode text to exactly the ids of vtrain's own encoder (`data_tool
encode`) and decode them back, for a trained bpe, a tiktoken ranks file whose multi-byte ranks are
shuffled (an order no training produced: here the merge derivation and `ignore_merges` matter)
and one rank left out (an unused id), and the bytes tokenizer. Texts: scripture not trained on, many scripts, digits, whitespace runs of
every kind, contractions, special-token names, random code points of every plane."""
import base64
import json
import random
import shutil
import subprocess

import pytest

from conftest import run_tool

tokenizers = pytest.importorskip("tokenizers")  # scripts/requirements.txt

SAMPLES = [
    "Καλημέρα κόσμε", "Привет, мир!", "日本語のテキスト、中文：你好", "مرحبا ١٢٣", "שָׁלוֹם",
    "नमस्ते १२३४", "emoji 👍🏽 👨‍👩‍👧‍👦 🇬🇧", "e\u0301 a\u0308", "½ ² ⅓ Ⅻ ㊿ ０１２", "'ſ 'K It's WE'LL 'Ve",
    "digits 1234567 3.14159 1,000,000", "<|bos|>", "a <|bos|>b<|bos|>", "  \n\n\t \r\n\r\n",
    "\u00a0\u0085\u2003\u2028\u3000\u200b\ufeff\v\f", "trailing   ", "!!!???...", "\x00\x1f\x7f",
    # PCRE2 counts U+180E as \s, Oniguruma does not; U+1C89, U+A7CB, U+105C0 are letters of
    # Unicode 16, which tokenizers 0.23's Oniguruma knows and PCRE2 10.42 (Unicode 14) does not
    # (both gave other ids before the classes were written out)
    "ov\t\t\u180e\u180e's house", "x\u1c89y 1\u1c891 \ua7cb's \U000105c0\U000105c1 '\U000105c0",
]


def make_texts(seed):
    rnd = random.Random(seed)
    if shutil.which("bible"):
        prose = subprocess.run(["bible", "Mat1:1-Mat10:42"], capture_output=True, text=True).stdout
    else:
        prose = " ".join(rnd.choice(["the", "lord", "said", "unto", "moses", "and", "it", "was",
                                     "good.", "\n"]) for _ in range(20000))
    docs = [prose[i:i + 3000] for i in range(0, len(prose), 3000)] + SAMPLES
    for _ in range(80):
        parts = []
        for _ in range(rnd.randint(3, 30)):
            r = rnd.random()
            if r < 0.4:
                parts.append(rnd.choice(SAMPLES))
            elif r < 0.7:
                j = rnd.randrange(len(prose) - 60)
                parts.append(prose[j:j + rnd.randint(1, 60)])
            else:
                cps = [rnd.choice([rnd.randint(0x20, 0x7e), rnd.randint(0x80, 0xd7ff),
                                   rnd.randint(0xe000, 0x10ffff)]) for _ in range(rnd.randint(1, 20))]
                parts.append("".join(map(chr, cps)))
        docs.append("".join(parts))
    return docs


@pytest.fixture(scope="module")
def tokdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hftok")
    if shutil.which("bible"):
        train = subprocess.run(["bible", "Gen1:1-Lev27:34"], capture_output=True, text=True).stdout
    else:
        train = " ".join(make_texts(1)[:20])
    (d / "train.txt").write_text(train)
    run_tool("train-bpe", "--input", d / "train.txt", "--vocab", 1500, "--out", d / "bpe.json",
             "--quiet")
    toks = [base64.b64decode(t) for t in json.loads((d / "bpe.json").read_text())["tokens"]]
    multi = list(range(256, len(toks)))
    random.Random(7).shuffle(multi)
    with open(d / "shuffled.tiktoken", "w") as f:
        for r, t in enumerate(toks[:256] + [toks[i] for i in multi]):
            if r != 700:  # an unused id: <|bos|> stays at vocab_size - 1
                f.write(f"{base64.b64encode(t).decode()} {r}\n")
    return d


KINDS = ["bpe", "tiktoken", "bytes"]


def spec(tokdir, kind):
    """data_tool's TOK argument for each kind."""
    return {"bpe": str(tokdir / "bpe.json"), "tiktoken": f"tiktoken:{tokdir}/shuffled.tiktoken",
            "bytes": "bytes"}[kind]


def vtrain_ids(tokdir, kind, text):
    (tokdir / "in.txt").write_bytes(text.encode())
    out = run_tool("encode", "--tokenizer", spec(tokdir, kind), "--input", tokdir / "in.txt").stdout
    return [int(x) for x in out.split()]


@pytest.mark.parametrize("kind", KINDS)
def test_hf_tokenizer_gives_vtrains_ids(tokdir, kind):
    out = tokdir / ("hf_" + kind)
    run_tool("hf-tokenizer", "--tokenizer", spec(tokdir, kind), "--out", out, "--max-length", 512)
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    hf.encode_special_tokens = True  # "<|bos|>" inside text is text, as vtrain encodes it
    vocab = {"bpe": 1500, "tiktoken": 1500, "bytes": 257}[kind]
    assert hf.get_vocab_size(with_added_tokens=True) == vocab
    bos = vocab - 1
    assert hf.token_to_id("<|bos|>") == bos
    docs = make_texts(20261126)
    n = 0
    for d in docs:
        want = vtrain_ids(tokdir, kind, d) if len(d) else []
        assert hf.encode(d, add_special_tokens=False).ids == want, d[:200]
        assert hf.decode(want, skip_special_tokens=False) == d
        n += len(want)
    assert n > 20000
    # Special tokens asked for: <|bos|> first, as vtrain starts every document.
    assert hf.encode("In the beginning").ids == [bos] + vtrain_ids(tokdir, kind, "In the beginning")
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["bos_token"] == config["eos_token"] == "<|bos|>"
    assert config["model_max_length"] == 512 and config["split_special_tokens"] is True
    if kind == "tiktoken":
        # The shuffled ranks make the merge rule matter: without ignore_merges (tiktoken's
        # whole-chunk rule) the same file gives other ids on this text.
        j = json.loads((out / "tokenizer.json").read_text())
        j["model"]["ignore_merges"] = False
        other = tokenizers.Tokenizer.from_str(json.dumps(j))
        text = "".join(docs[:40])
        assert other.encode(text, add_special_tokens=False).ids != vtrain_ids(tokdir, kind, text)


def test_vtrain_names_a_hugging_face_file(tokdir):
    """vtrain reads its own format only; given the Hugging Face file it says which file to use."""
    out = tokdir / "hf_refused"
    run_tool("hf-tokenizer", "--tokenizer", spec(tokdir, "bpe"), "--out", out)
    (tokdir / "in.txt").write_text("x")
    r = run_tool("encode", "--tokenizer", out / "tokenizer.json", "--input", tokdir / "in.txt",
                 check=False)
    assert r.returncode != 0 and "Hugging Face tokenizers file" in r.stderr
    assert "vtrain_tokenizer.json" in r.stderr
