"""`vtrain export` (issue 28 item 3) against the independent JAX reference: a tiny model of each
value mode and block shape below is trained a few steps, exported, and its model.safetensors and
config.json (read with the `safetensors` package) fed to reference_model.forward_logits; the
logits must equal the ones vtrain wrote into export_check.safetensors to 1e-4 (relative to the
largest logit), modeling_vtrain.py is bench/torch_model.py byte for byte and config.json names its
transformers classes (auto_map); its Hugging Face tokenizer (tokenizer.json, loaded with
`tokenizers`) gives vtrain's ids for a text. A bf16 export holds the fp32 weights rounded to nearest even. A checkpoint that
does not verify, and an --out that exists, are refused with nothing written."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reference_model as rm  # noqa: E402

import safetensors.numpy as st  # noqa: E402  (scripts/requirements.txt)

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
MODEL = ["--layers", "3", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "2", "--final-eval-tokens", "0", "--steps", "3"]
CASES = {
    "baseline": [],
    "bov": ["--value", "bov"],
    "resformer-plus": ["--value", "resformer-plus"],
    "value-embed": ["--value", "value-embed"],
    "neutreno-sas-p": ["--value", "neutreno", "--block", "sas-p"],
    "x0v-sas-orth": ["--value", "x0v", "--block", "sas", "--norm", "none", "--reparam-init", "orth"],
    "dense-parallel": ["--block", "parallel", "--dense"],
    "espa-smear-relu-w+1": ["--value", "x0v", "--value-coef", "0.5", "--block", "sas",
                            "--attn-bias", "espa", "--smear-gate", "on", "--mlp-act", "relu",
                            "--window-keys", "w+1"],
}


def vt(*args):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, env=ENV,
                          timeout=300)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    text = subprocess.run(["bible", "Gen1:1-Gen3:24"], capture_output=True, text=True).stdout
    (root / "c.txt").write_text(text)
    r = vt("prepare", "--input", root / "c.txt", "--out", root / "data", "--tokenizer",
           "bpe:300", "--quiet")
    assert r.returncode == 0, r.stderr
    return root / "data"


def trained(data, tmp_path, extra):
    ck = tmp_path / "ck"
    r = vt("train", "--data", data, *MODEL, *extra, "--ckpt-dir", ck)
    assert r.returncode == 0, r.stdout + r.stderr
    return ck / (ck / "latest").read_text().strip()


@pytest.mark.parametrize("case", list(CASES))
def test_exported_weights_give_vtrains_logits(case, data, tmp_path):
    ckpt = trained(data, tmp_path, CASES[case])
    out = tmp_path / "export"
    r = vt("export", "--ckpt", ckpt, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "export_check.safetensors", "model.safetensors", "modeling_vtrain.py",
        "tokenizer.json", "tokenizer_config.json", "vtrain_tokenizer.json"]
    # The PyTorch module is bench/torch_model.py as built in (bench/reproduce.sh part 7 runs it
    # against export_check.safetensors where torch is installed).
    root = os.path.dirname(os.path.dirname(HERE))
    assert (out / "modeling_vtrain.py").read_bytes() == open(
        os.path.join(root, "bench", "torch_model.py"), "rb").read()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "vtrain" and config["vtrain_step"] == 3
    # transformers' trust_remote_code entry points: classes that modeling_vtrain.py defines
    # (bench/check_export_hf.py loads them where transformers is installed).
    assert config["architectures"] == ["VtrainForCausalLM"]
    assert config["auto_map"] == {"AutoConfig": "modeling_vtrain.VtrainConfig",
                                  "AutoModelForCausalLM": "modeling_vtrain.VtrainForCausalLM"}
    source = (out / "modeling_vtrain.py").read_text()
    assert "class VtrainConfig(PretrainedConfig):" in source
    assert "class VtrainForCausalLM(_VtrainCore, PreTrainedModel, GenerationMixin):" in source
    weights = st.load_file(str(out / "model.safetensors"))
    fixed = {k[len("fixed."):]: v for k, v in weights.items() if k.startswith("fixed.")}
    params = {k: v for k, v in weights.items() if not k.startswith("fixed.")}
    assert set(params) == rm.expected_param_names(config)
    for k, v in params.items():
        assert v.shape == tuple(rm.expected_param_shapes(config)[k]), k
    check = st.load_file(str(out / "export_check.safetensors"))
    inputs, want = check["inputs"], check["logits"]
    assert inputs[0, 0] == config["bos_token_id"] and inputs.shape == (1, 32)
    got = np.asarray(rm.forward_logits(params, inputs, config,
                                       fixed=fixed or rm.default_fixed(config)))[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert (out / "vtrain_tokenizer.json").read_bytes() == (data / "tokenizer.json").read_bytes()


def test_export_tokenizer_gives_vtrains_ids(data, tmp_path):
    """The export's tokenizer.json loads in Hugging Face `tokenizers` and encodes text as vtrain
    did when it prepared the data: the shard of a document is <|bos|> then the text's ids
    (tests/data/test_hf_tokenizer.py checks more tokenizers and texts)."""
    tokenizers = pytest.importorskip("tokenizers")  # scripts/requirements.txt
    ckpt = trained(data, tmp_path, [])
    out = tmp_path / "export"
    assert vt("export", "--ckpt", ckpt, "--out", out).returncode == 0
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    hf.encode_special_tokens = True  # transformers' split_special_tokens (tokenizer_config.json)
    config = json.loads((out / "config.json").read_text())
    assert hf.get_vocab_size(with_added_tokens=True) == config["vocab_size"]
    assert hf.token_to_id("<|bos|>") == config["bos_token_id"]
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["bos_token"] == "<|bos|>"
    assert tc["model_max_length"] == config["seq_len"]
    # vtrain's ids for a text: its encoder (the one `vtrain prepare` runs) through data_tool.
    text = ("Und Gott sprach: Es werde Licht!  Καὶ εἶπεν ὁ θεός 1234567 \n\n\t<|bos|> "
            "naïve 日本語 👍🏽   it's IT'S\r\n")
    (tmp_path / "t.txt").write_bytes(text.encode())
    r = subprocess.run([os.path.join(BUILD, "data_tool"), "encode", "--tokenizer",
                        out / "vtrain_tokenizer.json", "--input", tmp_path / "t.txt"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = [int(x) for x in r.stdout.split()]
    assert len(want) > 40
    # <|bos|> first (the post-processor, as each document of vtrain's stream), then the text
    assert hf.encode(text).ids == [config["bos_token_id"]] + want
    assert hf.decode(want, skip_special_tokens=False) == text


def read_raw(path):
    """A safetensors file by its specification alone: header length, JSON header, bytes."""
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def test_bf16_export_rounds_the_fp32_weights(data, tmp_path):
    ckpt = trained(data, tmp_path, [])
    assert vt("export", "--ckpt", ckpt, "--out", tmp_path / "f32").returncode == 0
    r = vt("export", "--ckpt", ckpt, "--out", tmp_path / "bf16", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    h32, d32 = read_raw(tmp_path / "f32" / "model.safetensors")
    h16, d16 = read_raw(tmp_path / "bf16" / "model.safetensors")
    assert h16["__metadata__"]["format"] == "pt"
    for name, e in h32.items():
        if name == "__metadata__":
            continue
        assert h16[name]["dtype"] == "BF16" and h16[name]["shape"] == e["shape"]
        a, b = e["data_offsets"]
        w = np.frombuffer(d32[a:b], dtype="<u4")
        a, b = h16[name]["data_offsets"]
        bits = np.frombuffer(d16[a:b], dtype="<u2").astype(np.uint32)
        want = ((w + 0x7FFF + ((w >> 16) & 1)) >> 16).astype(np.uint32)  # nearest even
        np.testing.assert_array_equal(bits, want, err_msg=name)


def test_refusals_write_nothing(data, tmp_path):
    ckpt = trained(data, tmp_path, [])
    out = tmp_path / "x"
    out.mkdir()
    r = vt("export", "--ckpt", ckpt, "--out", out)
    assert r.returncode == 2 and "exists; choose another directory or pass --force" in r.stderr
    (tmp_path / "damaged").mkdir()  # an --out never lies inside the checkpoint's directory
    bad = tmp_path / "damaged" / "bad.h5"
    shutil.copy(ckpt, bad)
    with open(bad, "r+b") as f:  # damage the largest dataset's bytes: checksums no longer match
        f.seek(os.path.getsize(bad) // 2)
        f.write(b"\xff" * 64)
    r = vt("export", "--ckpt", bad, "--out", tmp_path / "y")
    assert r.returncode == 2 and "does not verify, nothing exported" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".y", "y"))) == []
