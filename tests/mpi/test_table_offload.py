"""Value tables in host memory (--table-offload): the tables of bov, bov-add and value-embed, their
gradients and AdamW states live in host memory; a step gathers the rows its micro-batches read
onto the device and returns their gradients to the host, which runs the tables' AdamW. With f32
activations the floats are the same as with the tables on the device, so every case must give
exactly (bit for bit) the per-step losses and checkpointed parameters of the same run without
offload: on the CPU and on the emulated device, with vocabulary-sharded tables (tp 2), ZeRO-1
host states (dp 2) and a table shared by the stages of a pipeline (--shared-table, pp 2). The
emulated device's peak memory falls by at least the tables' share, and checkpoints move between
runs with and without offload on other layouts."""
import json
import os
import subprocess

import h5py
import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
SEQ = 32
MICRO = 2
MODEL = ["--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--seq-len", str(SEQ),
         "--window", "8"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("offload")
    rng = np.random.default_rng(2)
    words = ["and", "the", "lord", "spake", "unto", "moses", "saying", "light", "waters", "day",
             "night", "heaven", "earth", "firmament", "evening", "morning"]
    (d / "corpus.txt").write_text(" ".join(rng.choice(words, size=30000)) + "\n")
    out = d / "data"
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "corpus.txt"), "--out", str(out),
                        "--tokenizer", "bpe:400", "--val-fraction", "0.1", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def train(datadir, out, flags, dp=1, tp=1, pp=1, device="cpu", steps=4, extra=(), code=0):
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, *flags, "--micro-batch", str(MICRO),
           "--global-batch", str(4 * MICRO * SEQ), "--steps", str(steps), "--tp", str(tp),
           "--pp", str(pp), "--eval-tokens", "1024", "--seed", "7", "--metrics",
           str(out / "m.jsonl"), "--ckpt-dir", str(out / "ckpt"), "--device", device,
           "--act-dtype", "f32", *extra]
    n = dp * tp * pp
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(n)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == code, f"{' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    rows = [json.loads(l) for l in open(out / "m.jsonl") if '"loss"' in l]
    return np.array([x["loss"] for x in rows]), rows, r.stdout


def params_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        def walk(name, obj):
            if isinstance(obj, h5py.Dataset) and name.startswith(("model/", "optimizer/")):
                out[name] = obj[()]
        f.visititems(walk)
    return out


# (value flags, dp, tp, pp, device)
CASES = {
    "bov_cpu": (["--value", "bov"], 1, 1, 1, "cpu"),
    "bov_tp2_cpu": (["--value", "bov"], 1, 2, 1, "cpu"),
    "bov-add_dp2_cpu": (["--value", "bov-add"], 2, 1, 1, "cpu"),
    "bov_shared_pp2_cpu": (["--value", "bov", "--shared-table"], 1, 1, 2, "cpu"),
    "value-embed_emulated": (["--value", "value-embed"], 1, 1, 1, "emulated"),
    "bov_tp2_emulated": (["--value", "bov"], 1, 2, 1, "emulated"),
    "bov-add_dp2_emulated": (["--value", "bov-add"], 2, 1, 1, "emulated"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_offload_gives_the_same_floats(case, datadir, tmp_path):
    flags, dp, tp, pp, device = CASES[case]
    ref, ref_rows, _ = train(datadir, tmp_path / "ref", flags, dp, tp, pp, device)
    off, rows, stdout = train(datadir, tmp_path / "off", flags, dp, tp, pp, device,
                              extra=["--table-offload"])
    assert "tables in host memory" in stdout, stdout
    assert ref[-1] < ref[0]
    assert np.array_equal(off, ref), f"losses with offload {off} vs {ref}"
    a = params_of(tmp_path / "ref" / "ckpt" / "step_00000004.h5")
    b = params_of(tmp_path / "off" / "ckpt" / "step_00000004.h5")
    assert set(a) == set(b)
    tables = [k for k in a if "value.table" in k]
    assert tables, sorted(a)
    for k in a:
        assert np.array_equal(a[k], b[k]), f"{k} differs (max {np.max(np.abs(a[k] - b[k])):.3e})"
    if device == "emulated":
        # A rank's tables (4 bytes an element), their gradients (4) and AdamW states (8 / dp,
        # ZeRO-1) left the device; the step's rows and their gradient came (8 bytes an element
        # of a row read, at most every row): at least 8 / dp bytes an element are saved.
        local = sum(a[k].size for k in tables if k.startswith("model/")) / tp
        saved = ref_rows[-1]["device_peak_bytes"] - rows[-1]["device_peak_bytes"]
        assert saved >= 0.9 * (8 / dp) * local, (saved, local)


def test_offload_checkpoints_move_between_layouts(datadir, tmp_path):
    """An offloaded run stopped at step 2 resumes without offload on tp 2, a resident run's
    checkpoint resumes with offload; both end where the uninterrupted run does."""
    flags = ["--value", "bov"]
    full, _, _ = train(datadir, tmp_path / "full", flags, steps=5)
    train(datadir, tmp_path / "a", flags, steps=5, extra=["--table-offload", "--stop-at-step", "2"],
          code=75)
    ck = tmp_path / "a" / "ckpt" / "step_00000002.h5"
    resumed, _, _ = train(datadir, tmp_path / "b", flags, tp=2, steps=5,
                          extra=["--resume", str(ck)])
    np.testing.assert_allclose(resumed, full[2:], rtol=1e-5)
    train(datadir, tmp_path / "c", flags, steps=5, extra=["--stop-at-step", "3"], code=75)
    ck = tmp_path / "c" / "ckpt" / "step_00000003.h5"
    resumed, _, _ = train(datadir, tmp_path / "d", flags, dp=2, steps=5,
                          extra=["--table-offload", "--resume", str(ck)])
    np.testing.assert_allclose(resumed, full[3:], rtol=1e-5)


def test_offload_refused_without_tables(datadir, tmp_path):
    r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--value", "v1",
                        "--steps", "1", "--table-offload"], capture_output=True, text=True, env=ENV)
    assert r.returncode != 0
    assert "--table-offload" in r.stderr and "v1" in r.stderr, r.stderr
