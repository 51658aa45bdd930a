"""Non-finite values never pass silently: a diverged run stops at the step where the loss or the
gradient norm stops being finite, names where the NaN/inf is (parameter, gradient, first block
output), writes no checkpoint of those weights and leaves the last good one as `latest`; a NaN
or inf injected into a weight, an activation or a gradient is caught on every backend (CPU, the
device emulator, the CUDA emulation); --on-nonfinite skip-step discards isolated bad steps and
stops after --max-nonfinite-steps in a row; `ckpt verify`, `eval`, `generate` and `--resume
auto` refuse a checkpoint holding non-finite values, naming the tensor."""
import json
import os
import subprocess

import h5py
import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
TINY = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
        "--micro-batch", "2", "--eval-tokens", "1024"]


def run(args, env=None, timeout=600):
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, env=e,
                          timeout=timeout)


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("nf")
    text = subprocess.run(["bible", "Gen1:1-Gen10:32"], capture_output=True, text=True).stdout
    (d / "c.txt").write_text(text)
    r = run(["prepare", "--input", d / "c.txt", "--out", d / "data", "--tokenizer", "bpe:300",
             "--val-fraction", "0.1", "--quiet"])
    assert r.returncode == 0, r.stderr
    return d / "data"


def steps_in(ckpt):
    return sorted(int(p.name[5:13]) for p in ckpt.glob("step_*.h5"))


def test_divergence_stops_and_keeps_the_last_good_checkpoint(datadir, tmp_path):
    ckpt = tmp_path / "ckpt"
    r = run(["train", "--data", datadir, *TINY, "--steps", "40", "--lr-scale", "1e6",
             "--ckpt-dir", ckpt, "--ckpt-every", "2", "--keep-last", "0",
             "--metrics", tmp_path / "m.jsonl"])
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    assert "training diverged" in r.stderr and "at step" in r.stderr, r.stderr
    assert "the weights of this step were not updated or saved" in r.stderr
    bad_step = int(r.stderr.split("at step ")[1].split(";")[0].split()[0])
    assert bad_step < 40
    # Every checkpoint written is finite and verifies; none is of the failing step or later.
    saved = steps_in(ckpt)
    assert saved and max(saved) < bad_step, (saved, bad_step)
    for s in saved:
        v = run(["ckpt", "verify", ckpt / f"step_{s:08d}.h5"])
        assert v.returncode == 0, v.stderr
    latest = (ckpt / "latest").read_text().strip()
    assert latest == f"step_{max(saved):08d}.h5"
    # The metrics hold no non-finite loss: the run never reported a diverged step as a number.
    for line in open(tmp_path / "m.jsonl"):
        rec = json.loads(line)
        if "loss" in rec:
            assert np.isfinite(rec["loss"]), rec


BACKENDS = ["cpu", "emulated", "cuda"]
INJECTIONS = [
    # (VTRAIN_INJECT_NONFINITE, fragments the error must hold)
    ("weight:blocks.1.attn.wq:nan@2",
     ["the loss is nan at step 2", "blocks.1.attn.wq (1)", "first non-finite block output is layer 1's"]),
    ("activation:0:inf@2",
     ["at step 2", "every parameter is finite", "first non-finite block output is layer 0's"]),
    ("gradient:blocks.0.mlp.fc:nan@2",
     ["the gradient norm is nan at step 2", "every parameter is finite",
      "gradients with non-finite values: 1 of", "blocks.0.mlp.fc (1)", "every block output is finite"]),
]


def cuda_usable():
    """A GPU (`vtrain devices` exit 0) or the CUDA emulation (exit 4)."""
    return subprocess.run([VTRAIN, "devices"], capture_output=True).returncode in (0, 4)


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("inject,fragments", INJECTIONS, ids=[i[0].split(":")[0] for i in INJECTIONS])
def test_injected_nonfinite_is_caught_on_every_backend(datadir, tmp_path, device, inject, fragments):
    if device == "cuda" and not cuda_usable():
        pytest.skip("no CUDA device and no CUDA emulation in this build")
    ckpt = tmp_path / "ckpt"
    extra = ["--device", device, "--act-dtype", "f32"] if device != "cpu" else []
    r = run(["train", "--data", datadir, *TINY, "--steps", "4", "--ckpt-dir", ckpt,
             "--ckpt-every", "1", *extra],
            env={"VTRAIN_INJECT_NONFINITE": inject, "VTRAIN_ALLOW_EMULATED_CUDA": "1"})
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], r.stderr)
    for frag in fragments:
        assert frag in r.stderr, (frag, r.stderr)
    assert steps_in(ckpt) == [1] and (ckpt / "latest").read_text().strip() == "step_00000001.h5"


def test_skip_step_discards_isolated_bad_steps(datadir, tmp_path):
    m = tmp_path / "m.jsonl"
    r = run(["train", "--data", datadir, *TINY, "--steps", "6", "--on-nonfinite", "skip-step",
             "--metrics", m, "--ckpt-dir", tmp_path / "ckpt"],
            env={"VTRAIN_INJECT_NONFINITE": "gradient:blocks.0.mlp.fc:nan@3"})
    assert r.returncode == 0, r.stderr
    assert "skipping step 3" in r.stdout and "1 step(s) were skipped" in r.stdout, r.stdout
    recs = [json.loads(l) for l in open(m)]
    skipped = [x["step"] for x in recs if x.get("skipped")]
    applied = [x["step"] for x in recs if "loss" in x and not x.get("skipped")]
    assert skipped == [3] and applied == [1, 2, 4, 5, 6], recs
    # The same run without the injection: identical up to the bad step, different after it
    # (step 3's update is missing).
    ok = run(["train", "--data", datadir, *TINY, "--steps", "6", "--metrics", tmp_path / "ref.jsonl"])
    assert ok.returncode == 0
    ref = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(tmp_path / "ref.jsonl") if '"loss"' in l}
    got = {x["step"]: x["loss"] for x in recs if "loss" in x and not x.get("skipped")}
    assert got[1] == ref[1] and got[2] == ref[2]
    assert got[4] != ref[4]


def test_skip_step_stops_after_too_many_in_a_row_and_on_bad_weights(datadir, tmp_path):
    r = run(["train", "--data", datadir, *TINY, "--steps", "10", "--on-nonfinite", "skip-step",
             "--max-nonfinite-steps", "3"],
            env={"VTRAIN_INJECT_NONFINITE": "gradient:blocks.0.mlp.fc:nan@2-9"})
    assert r.returncode == 2, r.stderr
    assert "skipping step 2" in r.stdout and "skipping step 3" in r.stdout
    assert "at step 4 (3 non-finite steps in a row)" in r.stderr, r.stderr
    # Non-finite weights cannot be skipped past: the run stops at once.
    r = run(["train", "--data", datadir, *TINY, "--steps", "10", "--on-nonfinite", "skip-step"],
            env={"VTRAIN_INJECT_NONFINITE": "weight:blocks.0.mlp.fc:nan@2"})
    assert r.returncode == 2 and "the loss is nan at step 2" in r.stderr, r.stderr
    assert "skipping" not in r.stdout


# The layout-independent checksum of checkpoint datasets (src/checkpoint/checksum.h), so the
# test can write a NaN the way an older vtrain would have saved one, with a valid checksum.
def pkmix64_sum(x):
    with np.errstate(over="ignore"):
        def mix(z):
            z = z + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return z ^ (z >> np.uint64(31))
        idx = np.arange(x.size, dtype=np.uint64)
        bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
        return int(mix(mix(idx) ^ bits).sum(dtype=np.uint64))


def test_nonfinite_checkpoint_is_reported_and_refused(datadir, tmp_path):
    ckpt = tmp_path / "ckpt"
    r = run(["train", "--data", datadir, *TINY, "--steps", "4", "--ckpt-dir", ckpt,
             "--ckpt-every", "2", "--keep-last", "0"])
    assert r.returncode == 0, r.stderr
    bad = ckpt / "step_00000004.h5"
    with h5py.File(bad, "r+") as f:
        ds = f["model"]["blocks.0.attn.wq"]
        w = ds[...]
        stored = ds.attrs["checksum"]
        stored = stored.decode() if isinstance(stored, bytes) else str(stored)
        assert f"{pkmix64_sum(w):016x}" == stored  # the Python checksum is vtrain's
        w[0, 0] = np.nan
        ds[...] = w
        ds.attrs["checksum"] = f"{pkmix64_sum(w):016x}"
    v = run(["ckpt", "verify", bad])
    assert v.returncode == 2, v.stdout
    assert "/model/blocks.0.attn.wq holds 1 non-finite value(s)" in v.stderr, v.stderr
    assert "checksum mismatch" not in v.stderr  # the checksum is valid: the values are the problem
    e = run(["eval", "--ckpt", bad, "--data", datadir, "--tokens", "1024"])
    assert e.returncode == 2 and "non-finite values (NaN or inf) in /model/blocks.0.attn.wq" in e.stderr, e.stderr
    g = run(["generate", "--ckpt", bad, "--prompt", "In the"])
    assert g.returncode == 2 and "/model/blocks.0.attn.wq" in g.stderr, g.stderr
    # --resume auto falls back to the newest good checkpoint.
    t = run(["train", "--data", datadir, *TINY, "--steps", "6", "--ckpt-dir", ckpt, "--resume", "auto"])
    assert t.returncode == 0, t.stderr
    assert f"resumed from {ckpt / 'step_00000002.h5'} at step 2" in t.stdout, t.stdout
    assert "skipping checkpoint" in t.stderr and "non-finite" in t.stderr


def test_injected_gradient_is_reported_with_zero2(datadir, tmp_path):
    """--zero 2 on dp 2: the gradient sum reaches only the owners, and the report still finds
    the injected NaN (the norm over the owned parts, the listing over the whole sum)."""
    ckpt = tmp_path / "ckpt"
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", VTRAIN, "train",
           "--data", str(datadir), *map(str, TINY), "--steps", "4", "--ckpt-dir", str(ckpt),
           "--ckpt-every", "1", "--zero", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               VTRAIN_INJECT_NONFINITE="gradient:blocks.0.mlp.fc:nan@2")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], r.stderr[-2000:])
    for frag in ["the gradient norm is nan at step 2", "every parameter is finite",
                 "gradients with non-finite values: 1 of", "blocks.0.mlp.fc (1)"]:
        assert frag in r.stderr, (frag, r.stderr[-2000:])
    assert steps_in(ckpt) == [1]
