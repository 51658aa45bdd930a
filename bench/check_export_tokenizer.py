# bench/check_export_tokenizer.py owns the check that the Hugging Face tokenizer vtrain writes
# (src/data/hf_tokenizer.h: `vtrain export`'s tokenizer.json + tokenizer_config.json) encodes text
# to exactly vtrain's own ids and decodes back to the text.
"""python bench/check_export_tokenizer.py DATA_TOOL [EXPORT_DIR...]

Tokenizers compared: each EXPORT_DIR (its vtrain_tokenizer.json against the directory's HF files),
and ones made here with DATA_TOOL (build/data_tool): a bpe:4096 trained on Genesis-Deuteronomy, a
tiktoken ranks file holding that bpe's tokens with the multi-byte ranks shuffled (a rank order no
training produced) and one left out (an unused id), and the bytes tokenizer. vtrain's ids come from `data_tool encode-docs`; the
HF ids from `tokenizers.Tokenizer.from_file` and, where transformers imports,
`AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)`. The texts (about 1.3 MB): the King James Bible's New
Testament (not trained on) cut into pieces, multilingual and emoji text, digits of many scripts,
whitespace runs of every kind, contractions, special-token names inside text, and random code
points from every plane; and, for the bpe, every code point in 13 contexts (about a minute). Exits
non-zero on any difference (ids, or decode(ids) != text)."""
import os
import random
import struct
import subprocess
import sys
import tempfile

WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", "\u00a0", "\u0085", "\u1680", "\u2000",
      "\u2003", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b",
      "\ufeff", "\n\n\n", "   \n  ", " \t \n"]
SAMPLES = [
    "Καλημέρα κόσμε, ἐν ἀρχῇ ἦν ὁ λόγος.", "Привет, мир! Съешь же ещё этих мягких булок.",
    "日本語のテキストと漢字、かな。中文：你好，世界！", "한국어 문장입니다.", "مرحبا بالعالم ١٢٣",
    "שָׁלוֹם עוֹלָם", "नमस्ते दुनिया १२३४", "ภาษาไทยไม่มีช่องว่าง", "Ça va? Naïve café, façade, Ærø, Øresund.",
    "emoji 👍🏽 👨‍👩‍👧‍👦 🇬🇧 ❤️ 🤖🤖🤖", "combining e\u0301 a\u0308 n\u0303 Z\u0351\u0359",
    "math ∑∫√∞ ≤≥ ½ ¾ ² ³ ⁴ ⅓ Ⅻ ⑫ ㊿", "kelvin \u212a and long s \u017f: 'ſ 'K 'ẞ",
    "fullwidth ０１２３４５ ＡＢＣ", "digits 1234567890 3.14159 1,000,000 2026-11-26 0x7fff 1e-9",
    "arabic-indic ٠١٢٣٤٥٦٧٨٩ devanagari ०१२३४५६७८९ thai ๐๑๒๓",
    "It's, I'm, we'll, they've, you're, she'd; IT'S, I'M, WE'LL, THEY'VE, 'S 'Ll 'vE 'Re",
    "<|bos|>", "text <|bos|> more<|bos|><|bos|> end", "code: for (int i = 0; i < n; ++i) { x[i] += 1; }",
    "    indented\n        more\n\ttab\n", "trailing spaces   ", "   ", "\n", "",
    "!!!???...---___***", "a\r\nb\r\n\r\nc\n\r", "¡¿«»‹›“”‘’„‚–—…•·", "\x00\x01\x1f\x7f control",
]


def texts(rnd):
    nt = subprocess.run(["bible", "Mat1:1-Rev22:21"], capture_output=True, text=True,
                        check=True).stdout
    docs = []
    i = 0
    while i < len(nt):  # the New Testament in pieces of 200 B .. 8 KB
        n = rnd.randint(200, 8000)
        docs.append(nt[i:i + n])
        i += n
    docs += SAMPLES
    for _ in range(300):  # samples, bible words, whitespace and digits shuffled together
        parts = []
        for _ in range(rnd.randint(5, 60)):
            r = rnd.random()
            if r < 0.3:
                parts.append(rnd.choice(SAMPLES))
            elif r < 0.55:
                parts.append(rnd.choice(WS) * rnd.randint(1, 4))
            elif r < 0.7:
                parts.append("".join(rnd.choice("0123456789٠١٢٣४५๓") for _ in range(rnd.randint(1, 12))))
            else:
                j = rnd.randrange(len(nt) - 80)
                parts.append(nt[j:j + rnd.randint(1, 80)])
        docs.append("".join(parts))
    for _ in range(200):  # random code points of every plane (no surrogates), some ASCII
        cps = []
        for _ in range(rnd.randint(1, 200)):
            r = rnd.random()
            if r < 0.4:
                cps.append(rnd.randint(0x20, 0x7e))
            elif r < 0.7:
                cps.append(rnd.randint(0x80, 0x2fff))
            else:
                c = rnd.randint(0x3000, 0x10ffff)
                cps.append(c if not 0xd800 <= c < 0xe000 else 0x20)
        docs.append("".join(map(chr, cps)))
    return docs


def vtrain_ids(data_tool, tok, docs, work):
    path = os.path.join(work, "docs.bin")
    with open(path, "wb") as f:
        for d in docs:
            b = d.encode()
            f.write(struct.pack("<I", len(b)) + b)
    out = os.path.join(work, "ids.bin")
    subprocess.run([data_tool, "encode-docs", "--tokenizer", tok, "--docs", path, "--threads", "1",
                    "--out", out], check=True, capture_output=True)
    raw = open(out, "rb").read()
    ids, p = [], 0
    for _ in docs:
        n = struct.unpack_from("<I", raw, p)[0]
        ids.append(list(struct.unpack_from(f"<{n}I", raw, p + 4)))
        p += 4 + 4 * n
    return ids


def compare(name, vt_tok, hf_dir, data_tool, docs, work):
    from tokenizers import Tokenizer
    want = vtrain_ids(data_tool, vt_tok, docs, work)
    hf = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    bos = hf.token_to_id("<|bos|>")
    if bos != hf.get_vocab_size(with_added_tokens=True) - 1:  # vtrain's <|bos|> is the last id
        print(f"{name}: <|bos|> is {bos}, not the last of {hf.get_vocab_size()} ids")
        return False
    # By default tokenizers reads "<|bos|>" inside text as the special token, where vtrain encodes
    # its characters: such texts must differ, and nothing else.
    named = [i for i, d in enumerate(docs) if "<|bos|>" in d]
    plain = [i for i, d in enumerate(docs) if hf.encode(d, add_special_tokens=False).ids != want[i]]
    print(f"{name} tokenizers, default: {len(plain)} texts encode differently, all of them among "
          f"the {len(named)} holding '<|bos|>': {set(plain) <= set(named)}")
    ok = set(plain) <= set(named)
    hf_text = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    hf_text.encode_special_tokens = True  # what transformers' split_special_tokens sets
    encoders = [("tokenizers, encode_special_tokens",
                 lambda t: hf_text.encode(t, add_special_tokens=False).ids,
                 lambda ids: hf_text.decode(ids, skip_special_tokens=False))]
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(hf_dir, trust_remote_code=True)  # as lm_eval
        encoders.append((f"AutoTokenizer ({type(at).__name__})",
                         lambda t: at(t, add_special_tokens=False)["input_ids"],
                         lambda ids: at.decode(ids)))
        # with special tokens: <|bos|> first, as vtrain starts every document
        got = at("In the beginning")["input_ids"]
        assert got == [bos] + at("In the beginning", add_special_tokens=False)["input_ids"], got
    except ImportError:
        pass
    nbytes = sum(len(d.encode()) for d in docs)
    ntok = sum(map(len, want))
    for label, enc, dec in encoders:
        bad = [i for i, d in enumerate(docs) if enc(d) != want[i]]
        bad_dec = [i for i, d in enumerate(docs) if dec(want[i]) != d]
        print(f"{name} {label}: {len(docs)} texts, {nbytes} bytes, {ntok} vtrain tokens: "
              f"{len(bad)} texts encode differently, {len(bad_dec)} decode differently")
        for i in bad[:3]:
            g = enc(docs[i])
            k = next((k for k, (a, b) in enumerate(zip(g, want[i])) if a != b), min(len(g), len(want[i])))
            print(f"  text {i} at token {k}: HF {g[max(0, k - 2):k + 4]} vtrain "
                  f"{want[i][max(0, k - 2):k + 4]} around {docs[i][:200]!r}"[:400])
        ok = ok and not bad and not bad_dec
    if "AutoTokenizer" in encoders[-1][0]:
        print(f"  AutoTokenizer(text) puts <|bos|> ({bos}) first; model_max_length "
              f"{at.model_max_length}, bos {at.bos_token!r}, eos {at.eos_token!r}")
    return ok


def every_code_point(name, vt_tok, hf_dir, data_tool, work):
    """Every code point (surrogates aside) in 13 contexts (beside letters, digits, spaces, tabs,
    newlines, an apostrophe and 's), 128 code points a text: the pre-split regex must cut as
    vtrain's PCRE2 does, whatever Unicode version each library knows."""
    from tokenizers import Tokenizer

    def seg(ch):
        return f"a{ch}b {ch}1{ch} '{ch}s {ch}'s\t{ch}\n{ch}{ch}  {ch}x.{ch}9 {ch}  "

    cps = [cp for cp in range(1, 0x110000) if not 0xd800 <= cp < 0xe000]
    blocks = [cps[i:i + 128] for i in range(0, len(cps), 128)]
    docs = ["".join(seg(chr(cp)) for cp in b) for b in blocks]
    want = vtrain_ids(data_tool, vt_tok, docs, work)
    hf = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    hf.encode_special_tokens = True
    got = hf.encode_batch(docs, add_special_tokens=False)
    bad = []
    for i in (i for i, g in enumerate(got) if g.ids != want[i]):
        one = [seg(chr(cp)) for cp in blocks[i]]
        for cp, d, w in zip(blocks[i], one, vtrain_ids(data_tool, vt_tok, one, work)):
            if hf.encode(d, add_special_tokens=False).ids != w:
                bad.append(cp)
    print(f"{name} tokenizers, every code point: {len(cps)} code points in {len(docs)} texts, "
          f"{sum(map(len, want))} vtrain tokens: {len(bad)} code points split differently"
          + (f" ({', '.join(hex(c) for c in bad[:12])} ...)" if bad else ""))
    return not bad


def main():
    data_tool = sys.argv[1]
    exports = sys.argv[2:]
    rnd = random.Random(20261126)
    docs = texts(rnd)
    ok = True
    with tempfile.TemporaryDirectory() as work:
        for d in exports:
            ok = compare(os.path.basename(d), os.path.join(d, "vtrain_tokenizer.json"), d,
                         data_tool, docs, work) and ok
        train = os.path.join(work, "train.txt")
        with open(train, "w") as f:
            f.write(subprocess.run(["bible", "Gen1:1-Deu34:12"], capture_output=True, text=True,
                                   check=True).stdout)
        bpe = os.path.join(work, "bpe.json")
        subprocess.run([data_tool, "train-bpe", "--input", train, "--vocab", "4096", "--out", bpe,
                        "--quiet"], check=True, capture_output=True)
        import base64
        import json
        toks = [base64.b64decode(t) for t in json.load(open(bpe))["tokens"]]
        multi = list(range(256, len(toks)))
        rnd.shuffle(multi)
        tik = os.path.join(work, "shuffled.tiktoken")
        with open(tik, "w") as f:
            for r, t in enumerate(toks[:256] + [toks[i] for i in multi]):
                if r != 1000:  # one unused id, as a ranks file may have
                    f.write(f"{base64.b64encode(t).decode()} {r}\n")
        for name, spec in [("bpe:4096", bpe), ("tiktoken (shuffled ranks)", "tiktoken:" + tik),
                           ("bytes", "bytes")]:
            hf_dir = os.path.join(work, "hf_" + name.split()[0].replace(":", ""))
            os.makedirs(hf_dir)
            subprocess.run([data_tool, "hf-tokenizer", "--tokenizer", spec, "--out", hf_dir],
                           check=True)
            ok = compare(name, spec, hf_dir, data_tool, docs, work) and ok
            if name.startswith("bpe"):
                ok = every_code_point(name, spec, hf_dir, data_tool, work) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
