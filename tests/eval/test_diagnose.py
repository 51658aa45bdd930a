"""`vtrain diagnose` (over-smoothing diagnostics) on every layout gives one process's numbers: a
tiny model of each value mode (and a shaped block with an attention bias and NeuTRENO, and the
interleaved schedule) is trained a few steps on one process, then diagnosed on 1 process and
under mpirun on tp2 x pp2, dp2 x tp2 and pp2 x vpp2, and on the emulated device; similarities, per-head entropies, importance
entropies and V1 shares must agree to float summation order (1e-5). The JSON and the table say
the same, layers without a V1 term have no share, and bad input is refused naming the flag."""
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import BUILD

VTRAIN = str(BUILD / "vtrain")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
MODEL = ["--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--seq-len", "32",
         "--window", "8"]
CASES = {
    "baseline": ["--value", "baseline"],
    "resformer-identity": ["--value", "resformer-identity"],
    "resformer-dense": ["--value", "resformer-dense"],
    "bov": ["--value", "bov"],
    "value-embed": ["--value", "value-embed"],
    "x0v": ["--value", "x0v"],
    "sas-p_espa_neutreno": ["--value", "neutreno", "--block", "sas-p", "--kv-heads", "4",
                            "--attn-bias", "espa"],
}
# (ranks, extra flags); the emulated device (f32) runs the device code paths on the host.
LAYOUTS = [(4, ["--tp", "2", "--pp", "2"]), (4, ["--tp", "2"]), (4, ["--pp", "2", "--vpp", "2"]),
           (1, ["--device", "emulated", "--act-dtype", "f32"])]
TOKENS = 1024


def run(cmd, ok=True, np_=1):
    cmd = list(map(str, cmd))
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("diagnose")
    rng = np.random.default_rng(0)
    words = ["the", "lord", "said", "unto", "moses", "and", "in", "beginning", "god", "light"]
    (d / "corpus.txt").write_text(" ".join(rng.choice(words, size=20000)) + "\n")
    run([VTRAIN, "prepare", "--input", d / "corpus.txt", "--out", d / "data", "--tokenizer",
         "bpe:300", "--val-fraction", "0.1", "--quiet"])
    return d / "data"


def train(datadir, out, flags):
    model = list(MODEL)
    if "--kv-heads" in flags:
        k = model.index("--kv-heads")
        del model[k:k + 2]
    run([VTRAIN, "train", "--data", datadir, *model, *flags, "--micro-batch", "2",
         "--global-batch", "256", "--steps", "4", "--seed", "5", "--ckpt-dir", out / "ckpt",
         "--final-eval-tokens", "0"])
    return out / "ckpt" / "step_00000004.h5"


def numbers(j):
    """Every number of a diagnosis, flattened in a fixed order (None for a missing share)."""
    out = [j["embedding_similarity"]]
    for row in j["layers"]:
        out += [row["similarity"], row["importance_entropy"], *row["head_entropy"],
                row["v1_share"]]
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_layouts_give_one_process_numbers(case, datadir, tmp_path):
    ckpt = train(datadir, tmp_path, CASES[case])
    base = [VTRAIN, "diagnose", "--ckpt", ckpt, "--data", datadir, "--tokens", TOKENS,
            "--micro-batch", "2"]
    r = run([*base, "--out", tmp_path / "one.json"])
    ref = json.load(open(tmp_path / "one.json"))
    assert ref["tokens"] == TOKENS and ref["sequences"] == TOKENS // 32 and len(ref["layers"]) == 4
    # The table prints the JSON's numbers.
    for row in ref["layers"]:
        line = next(l for l in r.stdout.splitlines() if l.split()[:1] == [str(row["layer"])])
        cols = line.split()
        assert abs(float(cols[2]) - row["similarity"]) < 1e-4, line
        share = "-" if row["v1_share"] is None else f"{row['v1_share']:.4f}"
        assert cols[6] == share, line
        assert len(row["head_entropy"]) == 4
        for e in row["head_entropy"]:
            assert 0.0 < e <= row["uniform_entropy"] + 1e-9
    shares = [row["v1_share"] for row in ref["layers"]]
    if case in ("baseline", "sas-p_espa_neutreno"):
        assert shares == [None] * 4  # no V1 / table term in v
    elif case in ("bov", "x0v"):
        assert shares[:2] == [None, None] and shares[2:] == [1.0, 1.0]  # last third: v = g E[id]
    elif case == "value-embed":
        assert [s is None for s in shares] == [True, False, True, False]  # alternate, ending last
        assert all(0.0 < s < 1.0 for s in shares if s is not None)
    else:
        assert shares[0] is None and all(0.0 < s < 1.0 for s in shares[1:])
    want = numbers(ref)
    for n, flags in LAYOUTS:
        out = tmp_path / f"n{n}{''.join(flags)}.json"
        run([*base, *flags, "--out", out], np_=n)
        got = numbers(json.load(open(out)))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert (a is None) == (b is None), (flags, got, want)
            if a is not None:
                assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (flags, got, want)


def test_bad_input_is_refused(datadir, tmp_path):
    ckpt = train(datadir, tmp_path, ["--value", "baseline"])
    r = run([VTRAIN, "diagnose", "--ckpt", ckpt, "--tokens", "64"], ok=False)
    assert r.returncode != 0 and "--data" in r.stderr, r.stderr
    r = run([VTRAIN, "diagnose", "--ckpt", ckpt, "--data", datadir, "--tokens", "0"], ok=False)
    assert r.returncode != 0 and "--tokens" in r.stderr, r.stderr
    # Data in another vocabulary (bytes: 257 tokens; the model's is bpe) is refused.
    run([VTRAIN, "prepare", "--input", datadir.parent / "corpus.txt", "--out", tmp_path / "bytes",
         "--tokenizer", "bytes", "--val-fraction", "0.1", "--quiet"])
    r = run([VTRAIN, "diagnose", "--ckpt", ckpt, "--data", tmp_path / "bytes"], ok=False)
    assert r.returncode == 2 and "--data" in r.stderr and "its tokenizer has 257 tokens, the checkpoint's model" in r.stderr, r.stderr
    r = run([VTRAIN, "diagnose", "--ckpt", tmp_path / "missing.h5", "--data", datadir], ok=False)
    assert r.returncode != 0 and "missing.h5" in r.stderr, r.stderr
    r = run([VTRAIN, "diagnose", "--ckpt", ckpt, "--data", datadir, "--tokens", "128",
             "--out", tmp_path / "no" / "such" / "dir" / "d.json"], ok=False)
    assert r.returncode != 0 and "--out" in r.stderr, r.stderr
