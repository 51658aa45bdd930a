"""Bad input gets a clear error and nothing is lost: a table of refusals across prepare, train,
eval, generate and ckpt. Each case runs one command and asserts its exit code (2: a refusal,
never a signal or an abort), a fragment of the message that names the actual cause, and that
nothing was written or overwritten (the output directories it names are byte for byte as before,
or still absent). The inputs are made here: a small prepared corpus and variants of it (a tiny or
missing validation split, ids outside the vocabulary in a train or val shard, a corrupt shard
header), checkpoints (good, with NaN weights, truncated, not HDF5), tokenizer files and corpora
with bad records."""
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess

import h5py
import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
TINY = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
        "--micro-batch", "2", "--eval-tokens", "1024"]


def vt(*args, timeout=300, env=None):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True,
                          errors="replace", env=env or ENV, timeout=timeout)


def shard_tokens(path):
    hdr = np.fromfile(path, dtype=np.int32, count=256)
    dt = np.uint16 if hdr[0] == 20240520 else np.uint32
    return hdr, np.fromfile(path, dtype=dt, offset=1024)


def write_shard(path, hdr, toks):
    with open(path, "wb") as f:
        f.write(hdr.astype(np.int32).tobytes())
        f.write(toks.tobytes())


def edit_config(**fields):
    def edit(f):
        c = json.loads(f.attrs["config"])
        c.update(fields)
        f.attrs["config"] = json.dumps(c)
    return edit


def set_attr(name, value):
    def edit(f):
        f.attrs[name] = value
    return edit


def transpose(path):
    def edit(f):
        a = f[path][...]
        del f[path]
        f.create_dataset(path, data=a.T.copy())
    return edit


def delete(path):
    def edit(f):
        del f[path]
    return edit


def add_chunked(path, shape):
    def edit(f):
        f.create_dataset(path, shape=shape, dtype="f4", chunks=(1, 1 << 20))
    return edit


def reshape_state(path):
    def edit(f):
        a = f[path][...]
        del f[path]
        f.create_dataset(path, data=a.reshape(-1)[: a.size // 2].copy())
    return edit


# The test checkpoint is L2 d32 h2 T32, vocabulary 300 (padded 320), format 2, step 2.
CKPT_EDITS = {
    # issue 25 item 5, its reproductions ...
    "ck_norm_eps_neg": edit_config(norm_eps=-1),
    "ck_rope_base_zero": edit_config(rope_base=0),
    "ck_softcap_zero": edit_config(logit_softcap=0),
    "ck_mlp_ratio_huge": edit_config(mlp_ratio=1e9),
    "ck_n_layer_huge": edit_config(n_layer=1e9),
    "ck_seq_len_huge": edit_config(seq_len=2e9),
    "ck_n_layer_frac": edit_config(n_layer=2.5),
    "ck_step_neg": set_attr("step", np.int64(-5)),
    "ck_format_str1": set_attr("format_version", "1"),
    "ck_lm_head_t": transpose("model/lm_head"),
    "ck_no_state": delete("optim/blocks.0.attn.wq/momentum_buffer"),
    "ck_chunked_huge": add_chunked("extra", (1, 1 << 40)),
    # ... and variants
    "ck_norm_eps_zero": edit_config(norm_eps=0),
    "ck_softcap_neg": edit_config(logit_softcap=-15.0),
    "ck_mlp_ratio_zero": edit_config(mlp_ratio=0),
    "ck_n_layer_str": edit_config(n_layer="2"),
    "ck_n_layer_missing": lambda f: f.attrs.__setitem__("config", json.dumps(
        {k: v for k, v in json.loads(f.attrs["config"]).items() if k != "n_layer"})),
    "ck_vocab_neg": edit_config(vocab_size=-7),
    "ck_heads_zero": edit_config(n_head=0),
    "ck_detach_number": edit_config(detach_v1=3),
    "ck_params_huge": edit_config(n_layer=4096, n_embd=1 << 20, n_head=8192, n_kv_head=8192, head_dim=128),
    "ck_dim_other": edit_config(n_embd=64, head_dim=32),
    "ck_step_huge": set_attr("step", np.int64(10**13)),
    "ck_tokens_neg": set_attr("tokens", np.int64(-1)),
    "ck_wte_t": transpose("model/wte"),
    "ck_state_shape": reshape_state("optim/wte/exp_avg"),
    "ck_chunked_square": add_chunked("optim/junk", (1 << 20, 1 << 20)),
}


@pytest.fixture(scope="module")
def W(tmp_path_factory):
    """Every input the cases use, made once."""
    root = tmp_path_factory.mktemp("bad")
    w = {"root": root}
    text = subprocess.run(["bible", "Gen1:1-Gen10:32"], capture_output=True, text=True).stdout
    (root / "corpus.txt").write_text(text)
    w["corpus"] = root / "corpus.txt"
    r = vt("prepare", "--input", w["corpus"], "--out", root / "data", "--tokenizer", "bpe:300",
           "--val-fraction", "0.1", "--quiet")
    assert r.returncode == 0, r.stderr
    w["data"] = root / "data"
    # Variants of the data directory.
    r = vt("prepare", "--input", w["corpus"], "--out", root / "tinyval", "--tokenizer", "bpe:300",
           "--val-fraction", "0.0001", "--quiet")
    assert r.returncode == 0, r.stderr
    w["tinyval"] = root / "tinyval"
    r = vt("prepare", "--input", w["corpus"], "--out", root / "noval", "--tokenizer", "bpe:300",
           "--val-fraction", "0", "--quiet")
    assert r.returncode == 0, r.stderr
    w["noval"] = root / "noval"
    for name, split, at in (("oovval", "val", 100), ("oovtrain", "train", 5000)):
        d = root / name
        shutil.copytree(w["data"], d)
        path = d / f"{split}_000000.bin"
        hdr, toks = shard_tokens(path)
        toks = toks.copy()
        toks[at] = 65000
        write_shard(path, hdr, toks)
        w[name] = d
    d = root / "badheader"
    shutil.copytree(w["data"], d)
    raw = bytearray((d / "train_000000.bin").read_bytes())
    raw[0:4] = (12345).to_bytes(4, "little")
    (d / "train_000000.bin").write_bytes(bytes(raw))
    w["badheader"] = d
    d = root / "notok"
    shutil.copytree(w["data"], d)
    (d / "tokenizer.json").unlink()
    w["notok"] = d
    # Checkpoints: a 2-step run.
    r = vt("train", "--data", w["data"], *TINY, "--steps", "2", "--ckpt-dir", root / "ckdir")
    assert r.returncode == 0, r.stderr
    w["ckdir"] = root / "ckdir"
    w["ckpt"] = root / "ckdir" / "step_00000002.h5"
    w["nan_ckpt"] = root / "nan.h5"
    shutil.copy(w["ckpt"], w["nan_ckpt"])
    with h5py.File(w["nan_ckpt"], "r+") as f:
        ds = f["model"]["blocks.1.mlp.fc"]
        a = ds[...]
        a[0, 0] = np.nan
        ds[...] = a  # the checksum no longer matches either: verify names both problems
    w["trunc_ckpt"] = root / "trunc.h5"
    w["trunc_ckpt"].write_bytes(w["ckpt"].read_bytes()[:5000])
    w["garbage"] = root / "garbage.h5"
    w["garbage"].write_bytes(b"not an hdf5 file at all\n" * 100)
    # Checkpoints from someone else: one config field, attribute or dataset edited (CKPT_EDITS).
    for name, edit in CKPT_EDITS.items():
        w[name] = root / f"{name}.h5"
        shutil.copy(w["ckpt"], w[name])
        with h5py.File(w[name], "r+") as f:
            edit(f)
    # Tokenizer files.
    w["tt_huge"] = root / "huge.tiktoken"
    w["tt_huge"].write_text("YQ== 0\nYg== 1073741800\n")
    w["tt_bad"] = root / "bad.tiktoken"
    w["tt_bad"].write_text("YQ== 0\nthis line is not base64 and a rank\n")
    w["tt_dup"] = root / "dup.tiktoken"
    w["tt_dup"].write_text("YQ== 0\nYg== 0\n")
    # Corpora with bad records.
    w["nofield"] = root / "nofield.jsonl"
    w["nofield"].write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    w["badjson"] = root / "badjson.jsonl"
    w["badjson"].write_text('{"text": "fine"}\n{"text": "cut off\n')
    w["badutf8"] = root / "badutf8.jsonl"
    w["badutf8"].write_bytes(b'{"text": "fine"}\n{"text": "\xff\xfe broken"}\n')
    gz = gzip.compress(b'{"text": "a document"}\n' * 2000)
    w["truncgz"] = root / "trunc.jsonl.gz"
    w["truncgz"].write_bytes(gz[: len(gz) // 2])
    w["file"] = root / "plain_file"
    w["file"].write_text("I am a file, not a directory\n")
    w["emptydir"] = root / "emptydir"
    w["emptydir"].mkdir()
    # Data directories whose meta.json names files outside themselves, or a shard twice.
    (root / "secret.bin").write_bytes((w["data"] / "train_000000.bin").read_bytes())
    def data_variant(name, edit=None, link=None):
        d = root / name
        shutil.copytree(w["data"], d)
        if edit:
            meta = json.loads((d / "meta.json").read_text())
            edit(meta)
            (d / "meta.json").write_text(json.dumps(meta))
        if link:
            (d / link[0]).unlink()
            os.symlink(link[1], d / link[0])
        w[name] = d
    data_variant("shard_dotdot", lambda m: m["train"].update(shards=["../../../../etc/passwd"]))
    data_variant("shard_abs", lambda m: m["train"].update(shards=[str(root / "secret.bin")]))
    data_variant("shard_link", link=("train_000000.bin", str(root / "secret.bin")))
    data_variant("val_dotdot", lambda m: m["val"].update(shards=["../data/val_000000.bin"]))
    data_variant("shard_twice", lambda m: m["train"].update(shards=["train_000000.bin", "./train_000000.bin"]))
    data_variant("val_in_train", lambda m: m["train"]["shards"].append("val_000000.bin"))
    # CORE bundles whose dataset_uri leaves the bundle.
    (root / "outside.jsonl").write_text(json.dumps({"context": "a", "continuation": "b"}) + "\n")
    def bundle(name, uri, link=None):
        b = root / name
        (b / "eval_data").mkdir(parents=True)
        (b / "core.yaml").write_text(f"icl_tasks:\n- label: t\n  dataset_uri: {uri}\n"
                                     "  num_fewshot: [0]\n  icl_task_type: language_modeling\n")
        (b / "eval_meta_data.csv").write_text("Eval Task,Random baseline\nt,0\n")
        if link:
            os.symlink(link, b / "eval_data" / uri)
        w[name] = b
    bundle("core_abs", str(root / "outside.jsonl"))
    bundle("core_dotdot", "../../outside.jsonl")
    bundle("core_link", "t.jsonl", link=str(root / "outside.jsonl"))
    # A metrics file of an earlier run.
    w["old_metrics"] = root / "old.jsonl"
    w["old_metrics"].write_text('{"step": 1, "loss": 5.5}\n{"step": 2, "loss": 5.1}\n')
    return w


def snapshot(path):
    """Every file under `path` with its bytes' hash, or None when `path` does not exist."""
    if not os.path.lexists(path):
        return None
    if os.path.isfile(path):
        return {"": hashlib.sha1(open(path, "rb").read()).hexdigest()}
    out = {}
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, path)] = hashlib.sha1(open(p, "rb").read()).hexdigest()
    return out


# (id, argv with {placeholders}, message regex, paths that must be untouched)
# {new} is a fresh path under the case's directory; {copy} a private copy of the checkpoint
# directory; the other names are inputs from W.
CASES = [
    # ---------------- prepare ----------------
    ("prep-no-input", ["prepare", "--out", "{new}", "--tokenizer", "bytes"], r"--input is required", ["{new}"]),
    ("prep-missing-file", ["prepare", "--input", "{root}/missing.txt", "--out", "{new}", "--tokenizer", "bytes"], r"missing\.txt", ["{new}"]),
    ("prep-out-is-file", ["prepare", "--input", "{corpus}", "--out", "{file}", "--tokenizer", "bytes"], r"exists and is not a directory", ["{file}"]),
    ("prep-out-not-ours", ["prepare", "--input", "{corpus}", "--out", "{ckdir}", "--tokenizer", "bytes"], r"not empty and was not made by vtrain prepare", ["{ckdir}"]),
    ("prep-out-is-input", ["prepare", "--input", "{data}", "--out", "{data}", "--tokenizer", "bytes"], r"is also an --input", ["{data}"]),
    ("prep-bad-tokenizer", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "wordpiece"], r"wordpiece", ["{new}"]),
    ("prep-bpe-not-number", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bpe:abc"], r"expected bpe:N", ["{new}"]),
    ("prep-bpe-too-small", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bpe:10"], r"N >= 257", ["{new}"]),
    ("prep-tiktoken-missing", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "tiktoken:{root}/no.tiktoken"], r"no\.tiktoken", ["{new}"]),
    ("prep-tiktoken-huge-rank", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "tiktoken:{tt_huge}"], r"huge\.tiktoken:2: rank 1073741800 is beyond vtrain's vocabulary limit", ["{new}"]),
    ("prep-tiktoken-malformed", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "tiktoken:{tt_bad}"], r"bad\.tiktoken:2: expected '<base64 token bytes> <rank>'", ["{new}"]),
    ("prep-tiktoken-duplicate", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "tiktoken:{tt_dup}"], r"rank 0 appears twice", ["{new}"]),
    ("prep-val-fraction-range", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--val-fraction", "1.5"], r"--val-fraction 1\.5: out of range", ["{new}"]),
    ("prep-val-fraction-one", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--val-fraction", "1"], r"expected a fraction below 1", ["{new}"]),
    ("prep-val-fraction-nan", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--val-fraction", "nan"], r"expected a finite number", ["{new}"]),
    ("prep-shard-tokens-zero", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--shard-tokens", "0"], r"--shard-tokens 0: out of range", ["{new}"]),
    ("prep-format-choice", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--format", "xml"], r"--format xml: expected one of auto, jsonl, text", ["{new}"]),
    ("prep-on-bad-record-choice", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--on-bad-record", "maybe"], r"expected one of fail, skip", ["{new}"]),
    ("prep-threads-negative", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--threads", "-1"], r"--threads -1: out of range", ["{new}"]),
    ("prep-json-no-field", ["prepare", "--input", "{nofield}", "--out", "{new}", "--tokenizer", "bytes"], r"nofield\.jsonl:2", ["{new}"]),
    ("prep-json-cut-off", ["prepare", "--input", "{badjson}", "--out", "{new}", "--tokenizer", "bytes"], r"badjson\.jsonl:2", ["{new}"]),
    ("prep-json-bad-utf8", ["prepare", "--input", "{badutf8}", "--out", "{new}", "--tokenizer", "bytes"], r"badutf8\.jsonl:2", ["{new}"]),
    ("prep-truncated-gzip", ["prepare", "--input", "{truncgz}", "--out", "{new}", "--tokenizer", "bytes"], r"trunc\.jsonl\.gz", ["{new}"]),
    ("prep-unknown-flag", ["prepare", "--input", "{corpus}", "--out", "{new}", "--tokenizer", "bytes", "--bogus"], r"unknown flag --bogus", ["{new}"]),
    ("prep-existing-keeps", ["prepare", "--input", "{root}/missing.txt", "--out", "{data}", "--tokenizer", "bytes"], r"missing\.txt", ["{data}"]),
    # ---------------- train: flags ----------------
    ("train-no-data", ["train", "--steps", "1"], r"--data is required", []),
    ("train-data-missing", ["train", "--data", "{root}/nope"], r"is not a directory; make one with `vtrain prepare`", []),
    ("train-data-no-tokenizer", ["train", "--data", "{notok}", *TINY], r"tokenizer", []),
    ("train-micro-batch-zero", ["train", "--data", "{data}", "--micro-batch", "0"], r"--micro-batch 0: out of range", []),
    ("train-steps-zero", ["train", "--data", "{data}", "--steps", "0"], r"--steps 0: out of range", []),
    ("train-grad-sync-unknown", ["train", "--data", "{data}", *TINY, "--grad-sync", "fp16"], r"--grad-sync fp16: expected one of fp32, bf16", []),
    ("train-recompute-unknown", ["train", "--data", "{data}", *TINY, "--recompute", "sometimes"], r"--recompute.*sometimes.*(off|attn|mlp|block)", []),
    ("train-spa-rescale-without-bias", ["train", "--data", "{data}", *TINY, "--block", "sas", "--spa-rescale", "off"], r"--spa-rescale off.*--attn-bias", []),
    ("plan-grad-sync-unknown", ["plan", "--preset", "d12", "--tokens", "1e9", "--grad-sync", "int8"], r"--grad-sync int8: expected one of fp32, bf16", []),
    ("plan-recompute-unknown", ["plan", "--preset", "d12", "--tokens", "1e9", "--recompute", "sometimes"], r"--recompute.*sometimes", []),
    ("train-log-every-zero", ["train", "--data", "{data}", "--log-every", "0"], r"--log-every 0: out of range", []),
    ("train-lr-scale-huge", ["train", "--data", "{data}", "--lr-scale", "1e30"], r"--lr-scale 1e30: out of range", []),
    ("train-lr-scale-nan", ["train", "--data", "{data}", "--lr-scale", "nan"], r"--lr-scale nan: expected a finite number", []),
    ("train-warmup-negative", ["train", "--data", "{data}", "--warmup", "-5"], r"--warmup -5: out of range", []),
    ("train-keep-last-negative", ["train", "--data", "{data}", "--keep-last", "-2"], r"--keep-last -2: out of range", []),
    ("train-warmdown-range", ["train", "--data", "{data}", "--warmdown", "1.5"], r"--warmdown 1\.5: out of range", []),
    ("train-max-grad-norm-negative", ["train", "--data", "{data}", "--max-grad-norm", "-1"], r"--max-grad-norm -1: out of range", []),
    ("train-seed-negative", ["train", "--data", "{data}", "--seed", "-1"], r"--seed -1: out of range", []),
    ("train-eval-tokens-zero", ["train", "--data", "{data}", "--eval-tokens", "0"], r"--eval-tokens 0: out of range", []),
    ("train-steps-not-integer", ["train", "--data", "{data}", "--steps", "2.5"], r"--steps 2\.5: expected an integer", []),
    ("train-global-batch-multiple", ["train", "--data", "{data}", *TINY, "--global-batch", "100"], r"not a multiple of micro-batch x seq-len", []),
    ("train-heads-divide", ["train", "--data", "{data}", "--layers", "2", "--dim", "64", "--heads", "3"], r"--heads 3 does not divide --dim 64", []),
    ("train-kv-heads", ["train", "--data", "{data}", "--kv-heads", "3"], r"--kv-heads 3 must divide --heads", []),
    ("train-head-dim-odd", ["train", "--data", "{data}", "--layers", "2", "--dim", "64", "--heads", "2", "--head-dim", "3"], r"head dimension must be even", []),
    ("train-window-pattern", ["train", "--data", "{data}", "--window-pattern", "XYZ"], r"--window-pattern 'XYZ'", []),
    ("train-value-mode", ["train", "--data", "{data}", *TINY, "--value", "resformer"], r"unknown value mode 'resformer'", []),
    ("train-value-layers", ["train", "--data", "{data}", *TINY, "--value", "v1", "--value-layers", "1,7"], r"7", []),
    ("train-tp-ranks", ["train", "--data", "{data}", *TINY, "--tp", "2"], r"does not divide the 1 ranks", []),
    ("train-vpp-no-pp", ["train", "--data", "{data}", *TINY, "--vpp", "2", "--ckpt-dir", "{new}"], r"--vpp 2 needs pipeline parallelism: .*--pp 2 or more", ["{new}"]),
    ("train-vpp-divide", ["train", "--data", "{data}", *TINY, "--pp", "2", "--vpp", "2", "--ckpt-dir", "{new}"], r"--vpp 2 does not divide the layers per pipeline stage \(2 layers over --pp 2 = 1 each\)", ["{new}"]),
    ("train-vpp-zero", ["train", "--data", "{data}", "--vpp", "0"], r"--vpp 0: out of range", []),
    ("train-device-choice", ["train", "--data", "{data}", "--device", "tpu"], r"--device tpu: expected one of cpu, cuda, emulated", []),
    ("train-on-nonfinite-choice", ["train", "--data", "{data}", "--on-nonfinite", "ignore"], r"expected one of stop, skip-step", []),
    ("train-duplicate-flag", ["train", "--data", "{data}", "--steps", "2", "--steps", "3"], r"--steps is given twice", []),
    ("train-positional", ["train", "--data", "{data}", "extra"], r"unexpected argument 'extra'", []),
    ("train-core-needs-dir", ["train", "--data", "{data}", *TINY, "--core-every", "2"], r"--core-every needs --core", []),
    ("train-muon-wd-style-no-wd", ["train", "--data", "{data}", *TINY, "--muon-wd-style", "nanochat"], r"--muon-wd-style nanochat shapes Muon's weight decay, and --muon-wd is 0", []),
    ("train-muon-wd-scale-no-wd", ["train", "--data", "{data}", *TINY, "--muon-wd-scale", "nanochat"], r"--muon-wd-scale nanochat shapes Muon's weight decay, and --muon-wd is 0", []),
    ("train-muon-wd-negative", ["train", "--data", "{data}", "--muon-wd", "-0.1"], r"--muon-wd -0\.1: out of range", []),
    ("train-muon-momentum-choice", ["train", "--data", "{data}", "--muon-momentum", "fast"], r"--muon-momentum fast: expected one of warmup, nanochat", []),
    ("train-window-keys-choice", ["train", "--data", "{data}", "--window-keys", "w+2"], r"--window-keys w\+2: expected one of w, w\+1", []),
    ("train-smear-gate-narrow", ["train", "--data", "{data}", "--layers", "2", "--dim", "16", "--heads", "1", "--seq-len", "32", "--smear-gate", "on"], r"--smear-gate on reads the first 24 channels; --dim 16", []),
    ("train-muon-wd-scale-no-d12", ["train", "--data", "{data}", "--layers", "14", "--dim", "32", "--heads", "2", "--seq-len", "32", "--value", "v1", "--value-layers", "13", "--muon-wd", "0.28", "--muon-wd-scale", "nanochat"], r"--muon-wd-scale nanochat needs this model's d12 counterpart", []),
    ("train-core-dir-missing", ["train", "--data", "{data}", *TINY, "--core-every", "2", "--core", "{root}/nobundle", "--ckpt-dir", "{new}"], r"nobundle", ["{new}"]),
    ("train-stop-at-step", ["train", "--data", "{data}", *TINY, "--steps", "5", "--stop-at-step", "5"], r"--stop-at-step 5 is not before the last step", []),
    ("train-resume-auto-no-dir", ["train", "--data", "{data}", *TINY, "--resume", "auto"], r"--resume auto needs --ckpt-dir", []),
    ("train-resume-missing", ["train", "--data", "{data}", *TINY, "--resume", "{root}/none.h5"], r"none\.h5: no such checkpoint file", []),
    ("train-ckpt-dir-is-file", ["train", "--data", "{data}", *TINY, "--ckpt-dir", "{file}"], r"--ckpt-dir \S+plain_file exists and is not a directory", ["{file}"]),
    # ---------------- train: checked before step 1 ----------------
    ("train-micro-batch-huge", ["train", "--data", "{data}", "--micro-batch", "100000000"], r"--micro-batch 100000000: out of range", []),
    ("train-memory-micro-batch", ["train", "--data", "{data}", "--layers", "2", "--dim", "32", "--heads", "2", "--micro-batch", "10000000", "--ckpt-dir", "{new}"], r"does not fit in memory: .*--skip-memory-check", ["{new}"]),
    ("train-memory-seq-len", ["train", "--data", "{data}", "--preset", "d12", "--seq-len", "1000000", "--ckpt-dir", "{new}"], r"does not fit in memory", ["{new}"]),
    ("train-val-too-small", ["train", "--data", "{tinyval}", *TINY, "--ckpt-dir", "{new}"], r"the validation split of \S+ holds \d+ tokens.*--final-eval-tokens 0", ["{new}"]),
    ("train-no-val-split", ["train", "--data", "{noval}", *TINY, "--ckpt-dir", "{new}"], r"has no val shards", ["{new}"]),
    ("train-oov-val", ["train", "--data", "{oovval}", *TINY, "--ckpt-dir", "{new}"], r"val_000000\.bin: token id 65000 at offset 100 is outside the vocabulary", ["{new}"]),
    ("train-oov-train", ["train", "--data", "{oovtrain}", *TINY, "--ckpt-dir", "{new}"], r"train_000000\.bin: token id 65000 at offset 5000 is outside the vocabulary", ["{new}"]),
    ("train-bad-shard-header", ["train", "--data", "{badheader}", *TINY, "--ckpt-dir", "{new}"], r"train_000000\.bin.*magic", ["{new}"]),
    ("train-resume-fewer-steps", ["train", "--data", "{data}", *TINY, "--steps", "1", "--ckpt-dir", "{copy}", "--resume", "auto"], r"--steps 1 is below the step of the checkpoint this run resumes \(step 2", ["{copy}"]),
    ("train-resume-other-model", ["train", "--data", "{data}", "--layers", "3", "--dim", "32", "--heads", "2", "--seq-len", "32", "--ckpt-dir", "{copy}", "--resume", "auto", "--steps", "4"], r"n_layer", ["{copy}"]),
    ("train-resume-garbage", ["train", "--data", "{data}", *TINY, "--resume", "{garbage}"], r"not an HDF5 file", ["{garbage}"]),
    ("train-resume-nan", ["train", "--data", "{data}", *TINY, "--resume", "{nan_ckpt}", "--steps", "4"], r"non-finite values \(NaN or inf\) in /model/blocks\.1\.mlp\.fc", ["{nan_ckpt}"]),
    ("train-metrics-is-data-meta", ["train", "--data", "{data}", *TINY, "--steps", "1", "--metrics", "{data}/meta.json", "--ckpt-dir", "{new}"], r"--metrics \S+/data/meta\.json is inside the --data directory", ["{data}", "{new}"]),
    ("train-metrics-new-in-data", ["train", "--data", "{data}", *TINY, "--steps", "1", "--metrics", "{data}/m.jsonl"], r"--metrics \S+/m\.jsonl is inside the --data directory", ["{data}"]),
    ("train-metrics-in-ckpt-dir", ["train", "--data", "{data}", *TINY, "--steps", "4", "--ckpt-dir", "{copy}", "--resume", "auto", "--metrics", "{copy}/m.jsonl"], r"inside the --ckpt-dir directory", ["{copy}"]),
    ("train-metrics-in-resume-dir", ["train", "--data", "{data}", *TINY, "--steps", "4", "--resume", "{ckpt}", "--metrics", "{ckdir}/m.jsonl"], r"--metrics \S+ckdir/m\.jsonl is inside the --resume checkpoint's directory", ["{ckdir}"]),
    ("train-metrics-fresh-run-keeps-old", ["train", "--data", "{data}", *TINY, "--steps", "1", "--metrics", "{old_metrics}", "--ckpt-dir", "{new}"], r"--metrics \S+old\.jsonl exists and is not empty \(\d+ bytes\); a fresh run never overwrites it: choose another --metrics path, or pass --resume", ["{old_metrics}", "{new}"]),
    ("train-metrics-resume-not-metrics", ["train", "--data", "{data}", *TINY, "--steps", "4", "--ckpt-dir", "{copy}", "--resume", "auto", "--metrics", "{corpus}"], r"corpus\.txt is not a vtrain metrics file", ["{corpus}", "{copy}"]),
    ("train-metrics-directory", ["train", "--data", "{data}", *TINY, "--steps", "1", "--metrics", "{emptydir}"], r"--metrics \S+emptydir exists and is not a regular file", ["{emptydir}"]),
    # ---------------- data directories and bundles refer only to files inside them ----------------
    ("train-shard-dotdot", ["train", "--data", "{shard_dotdot}", *TINY, "--ckpt-dir", "{new}"], r"meta\.json: train\.shards \"\.\./\.\./\.\./\.\./etc/passwd\" has a '\.\.' component; a data directory or bundle refers only to files inside itself", ["{new}"]),
    ("train-shard-absolute", ["train", "--data", "{shard_abs}", *TINY, "--ckpt-dir", "{new}"], r"train\.shards \"/\S+secret\.bin\" is an absolute path", ["{new}"]),
    ("train-shard-symlink-out", ["train", "--data", "{shard_link}", *TINY, "--ckpt-dir", "{new}"], r"train\.shards \"train_000000\.bin\" resolves to \S+secret\.bin, outside the directory", ["{new}"]),
    ("eval-val-shard-dotdot", ["eval", "--ckpt", "{ckpt}", "--data", "{val_dotdot}"], r"val\.shards \"\.\./data/val_000000\.bin\" has a '\.\.' component", []),
    ("train-shard-twice", ["train", "--data", "{shard_twice}", *TINY, "--ckpt-dir", "{new}"], r"shard \./train_000000\.bin is listed twice in train\.shards", ["{new}"]),
    ("train-val-shard-in-train", ["train", "--data", "{val_in_train}", *TINY, "--ckpt-dir", "{new}"], r"shard val_000000\.bin is listed in both train\.shards and val\.shards", ["{new}"]),
    ("eval-core-uri-absolute", ["eval", "--ckpt", "{ckpt}", "--core", "{core_abs}"], r"core\.yaml: task t: dataset_uri \"/\S+outside\.jsonl\" is an absolute path", ["{core_abs}"]),
    ("eval-core-uri-dotdot", ["eval", "--ckpt", "{ckpt}", "--core", "{core_dotdot}"], r"dataset_uri \"eval_data/\.\./\.\./outside\.jsonl\" has a '\.\.' component", []),
    ("eval-core-uri-symlink-out", ["eval", "--ckpt", "{ckpt}", "--core", "{core_link}"], r"dataset_uri \"eval_data/t\.jsonl\" resolves to \S+outside\.jsonl, outside the directory", []),
    ("train-core-uri-absolute", ["train", "--data", "{data}", *TINY, "--core-every", "2", "--core", "{core_abs}", "--ckpt-dir", "{new}"], r"dataset_uri \"/\S+\" is an absolute path", ["{new}"]),
    # ---------------- eval ----------------
    ("eval-no-ckpt", ["eval", "--data", "{data}"], r"--ckpt is required", []),
    ("eval-nothing", ["eval", "--ckpt", "{ckpt}"], r"nothing to evaluate", []),
    ("eval-tokens-zero", ["eval", "--ckpt", "{ckpt}", "--data", "{data}", "--tokens", "0"], r"--tokens 0: out of range", []),
    ("eval-micro-batch-zero", ["eval", "--ckpt", "{ckpt}", "--data", "{data}", "--micro-batch", "0"], r"--micro-batch 0: out of range", []),
    ("eval-ckpt-missing", ["eval", "--ckpt", "{root}/none.h5", "--data", "{data}"], r"none\.h5", []),
    ("eval-nan-ckpt", ["eval", "--ckpt", "{nan_ckpt}", "--data", "{data}"], r"/model/blocks\.1\.mlp\.fc", []),
    ("eval-val-too-small", ["eval", "--ckpt", "{ckpt}", "--data", "{tinyval}"], r"the validation split of \S+ holds \d+ tokens", []),
    ("eval-tp-ranks", ["eval", "--ckpt", "{ckpt}", "--data", "{data}", "--tp", "2"], r"does not divide the 1 ranks", []),
    ("eval-core-missing", ["eval", "--ckpt", "{ckpt}", "--core", "{root}/nobundle"], r"nobundle", []),
    # ---------------- diagnose ----------------
    ("diag-no-data", ["diagnose", "--ckpt", "{ckpt}"], r"--data is required", []),
    ("diag-tokens-zero", ["diagnose", "--ckpt", "{ckpt}", "--data", "{data}", "--tokens", "0"], r"--tokens 0: out of range", []),
    ("diag-micro-batch-zero", ["diagnose", "--ckpt", "{ckpt}", "--data", "{data}", "--micro-batch", "0"], r"--micro-batch 0: out of range", []),
    ("diag-ckpt-missing", ["diagnose", "--ckpt", "{root}/none.h5", "--data", "{data}"], r"none\.h5", []),
    ("diag-nan-ckpt", ["diagnose", "--ckpt", "{nan_ckpt}", "--data", "{data}"], r"/model/blocks\.1\.mlp\.fc", []),
    ("diag-val-too-small", ["diagnose", "--ckpt", "{ckpt}", "--data", "{tinyval}"], r"the validation split of \S+ holds \d+ tokens", []),
    ("diag-tp-ranks", ["diagnose", "--ckpt", "{ckpt}", "--data", "{data}", "--tp", "2"], r"does not divide the 1 ranks", []),
    ("diag-out-no-folder", ["diagnose", "--ckpt", "{ckpt}", "--data", "{data}", "--out", "{root}/nodir/d.json"], r"--out \S+d\.json: the folder \S+nodir does not exist", []),
    # ---------------- generate ----------------
    ("gen-max-tokens-huge", ["generate", "--ckpt", "{ckpt}", "--max-tokens", "4294967296"], r"--max-tokens 4294967296: out of range", []),
    ("gen-max-tokens-negative", ["generate", "--ckpt", "{ckpt}", "--max-tokens", "-5"], r"--max-tokens -5: out of range", []),
    ("gen-temperature-nan", ["generate", "--ckpt", "{ckpt}", "--temperature", "nan"], r"--temperature nan: expected a finite number", []),
    ("gen-temperature-negative", ["generate", "--ckpt", "{ckpt}", "--temperature", "-1"], r"--temperature -1: out of range", []),
    ("gen-top-k-negative", ["generate", "--ckpt", "{ckpt}", "--top-k", "-1"], r"--top-k -1: out of range", []),
    ("gen-no-ckpt", ["generate", "--prompt", "x"], r"--ckpt is required", []),
    ("gen-nan-ckpt", ["generate", "--ckpt", "{nan_ckpt}", "--prompt", "x"], r"/model/blocks\.1\.mlp\.fc", []),
    ("gen-garbage", ["generate", "--ckpt", "{garbage}", "--prompt", "x"], r"not an HDF5 file", []),
    ("gen-truncated", ["generate", "--ckpt", "{trunc_ckpt}", "--prompt", "x"], r"trunc\.h5", []),
    # ---------------- ckpt ----------------
    ("ckpt-no-args", ["ckpt"], r"usage: vtrain ckpt inspect\|verify PATH", []),
    ("ckpt-unknown-sub", ["ckpt", "frobnicate", "{ckpt}"], r"usage: vtrain ckpt inspect\|verify PATH", []),
    ("ckpt-verify-missing", ["ckpt", "verify", "{root}/none.h5"], r"none\.h5", []),
    ("ckpt-verify-truncated", ["ckpt", "verify", "{trunc_ckpt}"], r"trunc\.h5", []),
    ("ckpt-verify-nan", ["ckpt", "verify", "{nan_ckpt}"], r"/model/blocks\.1\.mlp\.fc holds 1 non-finite value", []),
    ("ckpt-inspect-garbage", ["ckpt", "inspect", "{garbage}"], r"not an HDF5 file", []),
    # ---------------- untrusted checkpoint configs (issue 25, item 5) ----------------
    ("ckpt-norm-eps-neg-eval", ["eval", "--ckpt", "{ck_norm_eps_neg}", "--data", "{data}"], r"ck_norm_eps_neg\.h5: bad config attribute: norm_eps -1 is out of range: expected a number in \[1e-12, 1\]", ["{ck_norm_eps_neg}"]),
    ("ckpt-norm-eps-neg-generate", ["generate", "--ckpt", "{ck_norm_eps_neg}", "--prompt", "x"], r"norm_eps -1 is out of range", []),
    ("ckpt-rope-base-zero-eval", ["eval", "--ckpt", "{ck_rope_base_zero}", "--data", "{data}"], r"rope_base 0 is out of range: expected a number in \[1, 1000000000000\]", []),
    ("ckpt-rope-base-zero-generate", ["generate", "--ckpt", "{ck_rope_base_zero}", "--prompt", "x"], r"rope_base 0 is out of range", []),
    ("ckpt-softcap-zero-eval", ["eval", "--ckpt", "{ck_softcap_zero}", "--data", "{data}"], r"logit_softcap 0 is out of range: expected a number in \[1, 10000\]", []),
    ("ckpt-mlp-ratio-huge-eval", ["eval", "--ckpt", "{ck_mlp_ratio_huge}", "--data", "{data}"], r"mlp_ratio 1000000000 is out of range: expected an integer in \[1, 64\]", []),
    ("ckpt-step-neg-resume", ["train", "--data", "{data}", *TINY, "--steps", "4", "--resume", "{ck_step_neg}"], r"ck_step_neg\.h5: attribute step -5 is out of range: expected an integer in \[0, 1000000000000\] \(the range of --steps\)", ["{ck_step_neg}"]),
    ("ckpt-n-layer-huge-verify", ["ckpt", "verify", "{ck_n_layer_huge}"], r"n_layer 1000000000 is out of range: expected an integer in \[1, 4096\] \(the range of --layers\)", []),
    ("ckpt-chunked-huge-verify", ["ckpt", "verify", "{ck_chunked_huge}"], r"/extra declares shape \(1, 1099511627776\) .* but the file holds only 0 bytes", []),
    ("ckpt-seq-len-huge-generate", ["generate", "--ckpt", "{ck_seq_len_huge}", "--prompt", "x"], r"seq_len 2000000000 is out of range: expected an integer in \[2, 16777216\] \(the range of --seq-len\)", []),
    ("ckpt-format-str1-verify", ["ckpt", "verify", "{ck_format_str1}"], r"format_version says 1 \(no checksums\) but the file has format 2's", []),
    ("ckpt-lm-head-t-verify", ["ckpt", "verify", "{ck_lm_head_t}"], r"/model/lm_head has shape \(320, 32\), the config implies \(32, 320\)", []),
    ("ckpt-lm-head-t-eval", ["eval", "--ckpt", "{ck_lm_head_t}", "--data", "{data}"], r"/model/lm_head has shape \(320, 32\)", []),
    ("ckpt-no-state-verify", ["ckpt", "verify", "{ck_no_state}"], r"missing optimizer state /optim/blocks\.0\.attn\.wq/momentum_buffer", []),
    ("ckpt-n-layer-frac-verify", ["ckpt", "verify", "{ck_n_layer_frac}"], r"n_layer 2\.5 is not an integer: expected an integer in \[1, 4096\]", []),
    # variants
    ("ckpt-norm-eps-zero-eval", ["eval", "--ckpt", "{ck_norm_eps_zero}", "--data", "{data}"], r"norm_eps 0 is out of range", []),
    ("ckpt-softcap-neg-generate", ["generate", "--ckpt", "{ck_softcap_neg}", "--prompt", "x"], r"logit_softcap -15 is out of range", []),
    ("ckpt-mlp-ratio-zero-verify", ["ckpt", "verify", "{ck_mlp_ratio_zero}"], r"mlp_ratio 0 is out of range", []),
    ("ckpt-n-layer-str-eval", ["eval", "--ckpt", "{ck_n_layer_str}", "--data", "{data}"], r"field n_layer is string \"2\"; expected an integer in \[1, 4096\]", []),
    ("ckpt-n-layer-missing-verify", ["ckpt", "verify", "{ck_n_layer_missing}"], r"field n_layer is missing", []),
    ("ckpt-vocab-neg-generate", ["generate", "--ckpt", "{ck_vocab_neg}", "--prompt", "x"], r"vocab_size -7 is out of range: expected an integer in \[2, 1073741824\]", []),
    ("ckpt-heads-zero-verify", ["ckpt", "verify", "{ck_heads_zero}"], r"n_head 0 is out of range: expected an integer in \[1, 65536\] \(the range of --heads\)", []),
    ("ckpt-detach-number-verify", ["ckpt", "verify", "{ck_detach_number}"], r"field detach_v1 is number 3; expected true or false", []),
    ("ckpt-params-huge-verify", ["ckpt", "verify", "{ck_params_huge}"], r"parameters, above vtrain's limit of 1099511627776 \(2\^40\)", []),
    ("ckpt-dim-other-eval", ["eval", "--ckpt", "{ck_dim_other}", "--data", "{data}"], r"the datasets do not match the config attribute: /model/\S+ has shape", []),
    ("ckpt-step-huge-verify", ["ckpt", "verify", "{ck_step_huge}"], r"attribute step 10000000000000 is out of range", []),
    ("ckpt-tokens-neg-generate", ["generate", "--ckpt", "{ck_tokens_neg}", "--prompt", "x"], r"attribute tokens -1 is out of range", []),
    ("ckpt-wte-t-generate", ["generate", "--ckpt", "{ck_wte_t}", "--prompt", "x"], r"/model/wte has shape \(32, 320\), the config implies \(320, 32\)", []),
    ("ckpt-state-shape-verify", ["ckpt", "verify", "{ck_state_shape}"], r"optimizer state /optim/wte/exp_avg has shape \(5120\), its parameter \(320, 32\)", []),
    ("ckpt-state-shape-resume", ["train", "--data", "{data}", *TINY, "--steps", "4", "--resume", "{ck_state_shape}"], r"/optim/wte/exp_avg has shape \(5120\)", ["{ck_state_shape}"]),
    ("ckpt-chunked-square-verify", ["ckpt", "verify", "{ck_chunked_square}"], r"/optim/junk declares shape \(1048576, 1048576\)", []),
    # ---------------- derived batch quantities (issue 25, item 10) ----------------
    ("train-global-batch-2p38", ["train", "--data", "{data}", *TINY, "--global-batch", "274877906944", "--ckpt-dir", "{new}"], r"--global-batch 274877906944 tokens makes 4294967296 micro-batches per step .* above vtrain's limit of 65536", ["{new}"]),
    ("train-global-batch-2p37", ["train", "--data", "{data}", *TINY, "--global-batch", "137438953472", "--ckpt-dir", "{new}"], r"--global-batch 137438953472 tokens makes 2147483648 micro-batches per step .* above vtrain's limit of 65536", ["{new}"]),
    ("train-global-batch-max-micro-1", ["train", "--data", "{data}", "--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "2", "--micro-batch", "1", "--global-batch", "1e15", "--ckpt-dir", "{new}"], r"--global-batch 1000000000000000 tokens makes 500000000000000 micro-batches .* limit of 65536", ["{new}"]),
    ("train-global-batch-over-data", ["train", "--data", "{data}", *TINY, "--global-batch", "64000", "--ckpt-dir", "{new}"], r"--global-batch 64000 tokens per step is more than the \d+ training tokens of \S+data", ["{new}"]),
    ("train-steps-x-global-batch", ["train", "--data", "{data}", *TINY, "--steps", "1e12", "--global-batch", "1e14", "--ckpt-dir", "{new}"], r"--steps 1000000000000 x --global-batch 100000000000000 tokens is more than vtrain's limit of \d+ \(2\^60\)", ["{new}"]),
    # ---------------- messages (issue 25, item 13) ----------------
    ("train-heads-exceed-dim", ["train", "--data", "{data}", "--heads", "256"], r"--heads 256 exceeds --dim 128 \(the preset's\)", []),
    ("train-heads-exceed-given-dim", ["train", "--data", "{data}", "--dim", "64", "--heads", "65"], r"--heads 65 exceeds --dim 64", []),
    ("train-eval-tokens-below-batch", ["train", "--data", "{data}", "--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--micro-batch", "2", "--eval-tokens", "32", "--ckpt-dir", "{new}"], r"--eval-tokens 32 holds only 1 rows of 32 tokens; raise --eval-tokens to at least 64", ["{new}"]),
    ("train-final-eval-tokens-below-batch", ["train", "--data", "{data}", *TINY, "--final-eval-tokens", "40", "--ckpt-dir", "{new}"], r"--final-eval-tokens 40 holds only 1 rows of 32 tokens; raise --final-eval-tokens to at least 64", ["{new}"]),
    ("eval-tokens-below-batch", ["eval", "--ckpt", "{ckpt}", "--data", "{data}", "--tokens", "32", "--micro-batch", "2"], r"--tokens 32 holds only 1 rows of 32 tokens; raise --tokens to at least 64", []),
    # ---------------- integer flags: decimal digits or a whole number like 2e9 ----------------
    ("train-steps-hex", ["train", "--data", "{data}", "--steps", "0x2"], r"--steps 0x2: expected an integer", []),
    ("train-steps-space", ["train", "--data", "{data}", "--steps", " 2"], r"--steps  2: expected an integer", []),
    ("train-steps-plus", ["train", "--data", "{data}", "--steps", "+2"], r"--steps \+2: expected an integer", []),
    ("train-steps-point-zero", ["train", "--data", "{data}", "--steps", "2.0"], r"--steps 2\.0: expected an integer", []),
    ("train-steps-exp-fraction", ["train", "--data", "{data}", "--steps", "25e-1"], r"--steps 25e-1: expected an integer", []),
    ("train-lr-scale-hex", ["train", "--data", "{data}", "--lr-scale", "0x1p3"], r"--lr-scale 0x1p3: expected a finite number", []),
    # ---------------- the binary ----------------
    ("unknown-command", ["frobnicate"], r"unknown command 'frobnicate'", []),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused(W, tmp_path, case):
    name, argv, pattern, untouched = case
    subs = {k: str(v) for k, v in W.items()}
    subs["new"] = str(tmp_path / "new")
    if any("{copy}" in a for a in argv) or "{copy}" in untouched:
        shutil.copytree(W["ckdir"], tmp_path / "copy")
        subs["copy"] = str(tmp_path / "copy")
    fill = lambda s: s.format(**subs) if isinstance(s, str) else s
    args = [fill(a) for a in argv]
    watched = {p: snapshot(fill(p)) for p in untouched}
    r = vt(*args)
    assert r.returncode == 2, (name, r.returncode, r.stdout[-800:], r.stderr[-1500:])
    assert re.search(pattern, r.stderr, re.S), (name, r.stderr[-1500:])
    for bad in ("uncaught exception", "bad_alloc", "crashed with signal", "Floating point", "Aborted",
                "root:x:"):  # no bytes of a file outside the inputs (/etc/passwd) in a message
        assert bad not in r.stderr, (name, r.stderr[-1500:])
    for p, before in watched.items():
        assert snapshot(fill(p)) == before, f"{name}: {fill(p)} changed"
    if "{new}" in untouched:
        assert not os.path.exists(subs["new"] + ".prepare-tmp"), name


def test_every_command_answers_help():
    for cmd in ("prepare", "train", "eval", "diagnose", "generate", "ckpt", "devices"):
        r = vt(cmd, "--help")
        assert r.returncode == 0, (cmd, r.stderr)
        assert r.stdout.startswith(f"usage: vtrain {cmd}"), (cmd, r.stdout[:200])



def test_a_shard_that_is_not_one_is_refused_without_printing_its_bytes(W, tmp_path):
    """A text file under a shard's name (a shard copied from /etc/passwd, say): the refusal says
    it is not an llm.c shard and prints none of its bytes, not even the first four as a 'magic'
    number (issue 25, item 6)."""
    d = tmp_path / "textshard"
    shutil.copytree(W["data"], d)
    secret = b"Qz7w:x:0:0:SECRETPASSWORDLINE\n" * 64
    (d / "train_000000.bin").write_bytes(secret)
    r = vt("train", "--data", d, *TINY, "--steps", "1")
    assert r.returncode == 2, r.stderr[-1500:]
    assert re.search(r"train_000000\.bin is not an llm\.c token shard", r.stderr), r.stderr[-1500:]
    as_int = str(int.from_bytes(secret[:4], "little", signed=True))
    for leak in ("Qz7w", "SECRET", as_int, secret[:4].hex()):
        assert leak not in r.stderr, (leak, r.stderr[-1500:])


def hold_prepare_lock(out, holder="pid 4242 on otherhost"):
    """Takes the lock a running `vtrain prepare --out OUT` holds, as that run would."""
    import fcntl
    f = open(str(out) + ".prepare-lock", "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.truncate(0)
    f.write(holder + "\n")
    f.flush()
    return f


@pytest.mark.parametrize("ranks", [1, 2])
def test_prepare_into_an_out_another_prepare_holds_is_refused(W, tmp_path, ranks):
    """Two prepare runs into one --out (issue 25, item 1): the second is refused at once, naming
    the first's pid and host and the lock file, exit 2, and the existing dataset, the first run's
    scratch directory and the lock stay as they were; under mpirun only rank 0 locks and every
    rank ends with the same refusal. Once the lock is free the same command succeeds and leaves
    no lock file behind."""
    out = tmp_path / "data"
    shutil.copytree(W["data"], out)
    scratch = tmp_path / "data.prepare-tmp"  # the running prepare's work, which must survive
    scratch.mkdir()
    (scratch / ".vtrain-prepare-tmp").write_text("scratch directory of vtrain prepare\n")
    (scratch / "tokenizer.json").write_text("half-written by the other run")
    before, scratch_before = snapshot(out), snapshot(scratch)
    cmd = [VTRAIN, "prepare", "--input", str(W["corpus"]), "--out", str(out), "--tokenizer",
           "bpe:512", "--quiet"]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks)] + cmd
    env = dict(ENV, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    lock = hold_prepare_lock(out)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, timeout=300)
        assert r.returncode == 2, (r.returncode, r.stdout[-800:], r.stderr[-1500:])
        assert re.search(r"another vtrain prepare \(pid 4242 on otherhost\) is writing --out \S+data "
                         r"\(it holds \S+data\.prepare-lock\); wait for it to end or choose another --out",
                         r.stderr), r.stderr[-1500:]
        assert r.stderr.count("error:") == 1, r.stderr
        assert snapshot(out) == before and snapshot(scratch) == scratch_before
        assert os.path.exists(str(out) + ".prepare-lock")
    finally:
        lock.close()
    shutil.rmtree(scratch)
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    assert json.loads((out / "meta.json").read_text())["tokenizer"]["spec"] == "bpe:512"
    assert json.loads((out / "tokenizer.json").read_text())["kind"].startswith("bpe")
    assert not os.path.exists(str(out) + ".prepare-lock") and not scratch.exists()


def test_two_prepare_runs_at_once_never_mix_or_lose_the_dataset(W, tmp_path):
    """The reproduction with two real runs into one existing --out: the first (bpe:1024) reads
    stdin, which this test keeps open, so it is certainly running (and holding the lock) when the
    second (bpe:512) starts. The second is refused at once naming the first's pid, and the dataset
    is untouched; once stdin closes the first finishes, and meta.json, tokenizer.json and the
    shards are all its output (bpe:1024), with no lock file left."""
    import socket
    import time
    out = tmp_path / "data"
    shutil.copytree(W["data"], out)
    before = snapshot(out)
    lockfile = str(out) + ".prepare-lock"
    first = subprocess.Popen([VTRAIN, "prepare", "--input", "-", "--format", "text", "--out", str(out), "--tokenizer",
                              "bpe:1024", "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=ENV)
    try:
        first.stdin.write(W["corpus"].read_bytes() * 4)
        first.stdin.flush()
        deadline = time.time() + 600  # a safety net: the lock comes within seconds
        while not (os.path.exists(lockfile) and f"pid {first.pid} " in open(lockfile).read()):
            assert time.time() < deadline and first.poll() is None, "the first run never locked"
            time.sleep(0.01)
        r = vt("prepare", "--input", W["corpus"], "--out", out, "--tokenizer", "bpe:512", "--quiet")
        # Refused at once: the first still holds the lock (its stdin is open, it cannot finish),
        # so a second that waited for the lock would not have returned at all.
        assert first.poll() is None, "the first run ended before the second was refused"
        assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
        assert f"another vtrain prepare (pid {first.pid} on {socket.gethostname()}) is writing --out" in r.stderr, r.stderr
        assert snapshot(out) == before
    finally:
        first.stdin.close()
    first.stdout.read()
    err = first.stderr.read().decode(errors="replace")
    assert first.wait(timeout=300) == 0, err[-1500:]
    meta = json.loads((out / "meta.json").read_text())
    tok = json.loads((out / "tokenizer.json").read_text())
    assert meta["tokenizer"]["spec"] == "bpe:1024" and meta["inputs"] == ["-"]
    assert len(tok["tokens"]) + len(tok["specials"]) == meta["tokenizer"]["vocab_size"] == 1024
    for name in meta["train"]["shards"] + meta["val"]["shards"]:
        hdr = np.fromfile(out / name, dtype=np.int32, count=256)
        assert hdr[0] == 20240520, name
    assert not os.path.exists(lockfile) and not os.path.exists(str(out) + ".prepare-tmp")


def test_metrics_of_a_resumed_run_are_appended_and_a_fresh_run_takes_an_empty_file(W, tmp_path):
    """The other side of the --metrics rules (issue 25, item 2): a fresh run writes into a new or
    empty file; a run with --resume appends to its own metrics file, keeping the earlier lines."""
    m, ck = tmp_path / "m.jsonl", tmp_path / "ck"
    m.write_text("")
    r = vt("train", "--data", W["data"], *TINY, "--steps", "2", "--ckpt-dir", ck, "--metrics", m,
           "--final-eval-tokens", "0")
    assert r.returncode == 0, r.stderr[-1500:]
    first = m.read_text()
    assert [json.loads(l)["step"] for l in first.splitlines()][:2] == [1, 2], first
    r = vt("train", "--data", W["data"], *TINY, "--steps", "3", "--ckpt-dir", ck, "--metrics", m,
           "--final-eval-tokens", "0", "--resume", "auto")
    assert r.returncode == 0, r.stderr[-1500:]
    text = m.read_text()
    assert text.startswith(first) and 3 in [json.loads(l)["step"] for l in text.splitlines()], text


def test_vpp_micro_batches_not_multiple_of_pp(W, tmp_path):
    """The interleaved schedule runs micro-batches in groups of pp: 3 micro-batches on pp = 2 is
    refused on every rank, naming --vpp, before --ckpt-dir is made (needs 2 MPI ranks)."""
    new = tmp_path / "new"
    env = dict(ENV, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", VTRAIN,
                        "train", "--data", str(W["data"]), "--layers", "4", "--dim", "32", "--heads", "2",
                        "--seq-len", "32", "--window", "16", "--eval-tokens", "1024",
                        "--micro-batch", "2", "--global-batch", str(3 * 2 * 32), "--pp", "2",
                        "--vpp", "2", "--ckpt-dir", str(new)],
                       capture_output=True, text=True, errors="replace", env=env, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], r.stderr[-1500:])
    assert re.search(r"--vpp 2: the interleaved schedule runs the micro-batches in groups of "
                     r"--pp 2, but a step has 3 micro-batches", r.stderr), r.stderr[-1500:]
    assert not new.exists()


MEM_MODEL = ["--layers", "4", "--dim", "128", "--heads", "4", "--seq-len", "128", "--window", "64",
             "--final-eval-tokens", "0"]
BREAKDOWN = ["weights (fp32)", "gradients (fp32)", "optimizer (Muon momentum; AdamW moments / dp)",
             "activations kept for backward", "backward temporaries", "logits and their gradient",
             "allowance", "total"]


def suggestions(stderr):
    """The layouts a memory refusal suggests: (flags, GiB per rank)."""
    return [(m.group(1).split(), float(m.group(2)))
            for m in re.finditer(r"^\s+(--tp \d+ --pp \d+ --micro-batch \d+[^:]*): ([\d.]+) GiB per rank",
                                 stderr, re.M)]


def train_argv(data, *extra, ranks=1):
    argv = [VTRAIN, "train", "--data", str(data), *MEM_MODEL, *map(str, extra)]
    if ranks > 1:
        argv = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), *argv]
    return argv


def run(argv):
    env = dict(ENV, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env,
                          timeout=600)


@pytest.mark.parametrize("ranks,limit", [(1, "0.15"), (2, "0.3")])
def test_memory_refusal_shows_the_breakdown_and_layouts_that_fit(W, tmp_path, ranks, limit):
    """A layout over --memory-limit-gib is refused before --ckpt-dir is made, with the planner's
    breakdown of the rank that needs the most and layouts of the same ranks that fit; each
    suggested layout then gets past the same check and trains a step. --skip-memory-check starts
    the refused layout anyway with the same text as a warning. L4 d128, 128 tokens x micro-batch
    64 (f32 activations on the CPU): about 0.33 GiB per rank; 2 ranks share the host's limit."""
    new = tmp_path / "new"
    big = ["--micro-batch", "64", "--memory-limit-gib", limit, "--steps", "1"]
    r = run(train_argv(W["data"], *big, "--ckpt-dir", new, ranks=ranks))
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], r.stderr[-3000:])
    err = r.stderr
    assert re.search(r"does not fit in memory: rank \d needs an estimated [\d.]+ GiB.*"
                     rf"the host has {limit}0? GiB \(--memory-limit-gib\)", err), err[-3000:]
    assert re.search(r"memory per GPU of tp 1 pp 1 dp \d micro-batch 64 recompute off", err), err[-3000:]
    for item in BREAKDOWN:
        assert item in err, (item, err[-3000:])
    assert f"layouts of the same {ranks} ranks that fit" in err, err[-3000:]
    fits = suggestions(err)
    assert fits, err[-3000:]
    assert not new.exists()
    per_rank = float(limit) / ranks
    for flags, gib in fits:
        assert gib <= per_rank, (flags, gib)
        # A suggestion keeps the refused run's global batch: 64 rows x 128 tokens per dp rank.
        gb = re.search(r"--global-batch (\d+)", " ".join(flags))
        assert gb is None or int(gb.group(1)) == 64 * 128 * ranks, flags
        ok = run(train_argv(W["data"], "--memory-limit-gib", limit, "--steps", "1", *flags,
                            ranks=ranks))
        assert ok.returncode == 0, (flags, ok.stdout[-800:], ok.stderr[-2000:])
        assert re.search(r"step 1/1", ok.stdout), (flags, ok.stdout[-800:])
    # --skip-memory-check: a warning with the same breakdown, and the run starts.
    r = run(train_argv(W["data"], *big, "--skip-memory-check", ranks=ranks))
    assert r.returncode == 0, (r.stdout[-800:], r.stderr[-2000:])
    assert "warning (--skip-memory-check): this run does not fit in memory" in r.stderr
    assert "activations kept for backward" in r.stderr and "layouts of the same" in r.stderr


def test_stop_signal_without_ckpt_dir_says_nothing_was_saved(W, tmp_path):
    """SIGTERM on a run without --ckpt-dir: exit 75 with a line saying no checkpoint was saved
    (issue 25, item 13: it used to say "checkpoint of step 0 saved")."""
    import signal
    import time
    p = subprocess.Popen([os.path.abspath(VTRAIN), "train", "--data", str(W["data"]), *TINY, "--steps", "1000000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         cwd=tmp_path)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line or line.startswith("step "):
                break
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 75, (p.returncode, out[-500:], err[-500:])
    assert "no checkpoint was saved because no --ckpt-dir was given" in out, out[-800:]
    assert "saved, exiting" not in out
    assert os.listdir(tmp_path) == []
