"""Value tables in host memory (--table-offload): the tables of bov, bov-add and value-embed, their
gradients and AdamW states live in host memory; a step gathers the rows its micro-batches read
onto the device and returns their gradients to the host, which runs the tables' AdamW. With f32
activations the floats are the same as with the tables on the device, so every case must give
exactly (bit for bit) the per-step losses and checkpointed parameters of the same run without
offload: on the CPU and on the emulated device, with vocabulary-sharded tables (tp 2), ZeRO-1
host states (dp 2) and a table shared by the stages of a pipeline (--shared-table, pp 2). The
emulated device's peak memory falls by at least the tables' share, and checkpoints move between
runs with and without offload on other layouts."""
import subprocess

import h5py
import numpy as np
import pytest

# The emulated-device layout tests' runner: a 4-layer d64 model, 4 micro-batches of 2 x 32
# tokens per step, a checkpoint at the end, metrics rows with device_peak_bytes.
from test_device_layouts import ENV, MICRO, MODEL, SEQ, VTRAIN, datadir, params_of, train  # noqa: F401


def stop_run(datadir, out, extra, steps, stop_at):
    """A one-process run that saves at `stop_at` and exits 75; returns that checkpoint."""
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--value", "bov", "--micro-batch",
           str(MICRO), "--global-batch", str(4 * MICRO * SEQ), "--steps", str(steps),
           "--eval-tokens", "1024", "--seed", "3", "--metrics", str(out / "m.jsonl"),
           "--ckpt-dir", str(out / "ckpt"), "--stop-at-step", str(stop_at), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 75, r.stdout[-2000:] + r.stderr[-2000:]
    return out / "ckpt" / f"step_{stop_at:08d}.h5"


# (value mode, extra flags, dp, tp, pp, device); f32 activations everywhere.
CASES = {
    "bov_cpu": ("bov", [], 1, 1, 1, "cpu"),
    "bov_tp2_cpu": ("bov", [], 1, 2, 1, "cpu"),
    "bov-add_dp2_cpu": ("bov-add", [], 2, 1, 1, "cpu"),
    "bov_shared_pp2_cpu": ("bov", ["--shared-table"], 1, 1, 2, "cpu"),
    "value-embed_emulated": ("value-embed", [], 1, 1, 1, "emulated"),
    "bov_tp2_emulated": ("bov", [], 1, 2, 1, "emulated"),
    "bov-add_dp2_emulated": ("bov-add", [], 2, 1, 1, "emulated"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_offload_gives_the_same_floats(case, datadir, tmp_path):
    mode, flags, dp, tp, pp, device = CASES[case]
    flags = flags + ["--act-dtype", "f32"]
    ref, ref_rows, _ = train(datadir, tmp_path / "ref", mode, dp, tp, pp, device, extra=flags)
    off, rows, stdout = train(datadir, tmp_path / "off", mode, dp, tp, pp, device,
                              extra=flags + ["--table-offload"])
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
    # The optimizer states too (the checkpoint's AdamW moments of the tables included).
    sa, sb = states_of(tmp_path / "ref" / "ckpt" / "step_00000004.h5"), states_of(
        tmp_path / "off" / "ckpt" / "step_00000004.h5")
    assert any("value.table" in k for k in sa), sorted(sa)[:10]
    for k in sa:
        assert np.array_equal(sa[k], sb[k]), f"state {k} differs"
    if device == "emulated":
        # A rank's tables (4 bytes an element), their gradients (4) and AdamW states (8 / dp,
        # ZeRO-1) left the device; the step's rows and their gradient came (8 bytes an element
        # of a row read, at most every row): at least 8 / dp bytes an element are saved.
        local = sum(a[k].size for k in tables) / tp
        saved = ref_rows[-1]["device_peak_bytes"] - rows[-1]["device_peak_bytes"]
        assert saved >= 0.9 * (8 / dp) * local, (saved, local)


def test_offload_checkpoints_move_between_layouts(datadir, tmp_path):
    """An offloaded run stopped at step 2 resumes without offload on tp 2, a resident run's
    checkpoint resumes with offload on dp 2; both end where the uninterrupted run does."""
    full, _, _ = train(datadir, tmp_path / "full", "bov", 1, 1, 1, "cpu", steps=5)
    ck = stop_run(datadir, tmp_path / "a", ["--table-offload"], 5, 2)
    resumed, _, _ = train(datadir, tmp_path / "b", "bov", 1, 2, 1, "cpu", steps=5,
                          extra=["--resume", str(ck)])
    np.testing.assert_allclose(resumed, full[2:], rtol=1e-5)
    ck = stop_run(datadir, tmp_path / "c", [], 5, 3)
    resumed, _, _ = train(datadir, tmp_path / "d", "bov", 2, 1, 1, "cpu", steps=5,
                          extra=["--table-offload", "--resume", str(ck)])
    np.testing.assert_allclose(resumed, full[3:], rtol=1e-5)


def states_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        def walk(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("model/"):
                out[name] = obj[()]
        f.visititems(walk)
    return out


def test_offload_refused_without_tables(datadir, tmp_path):
    r = subprocess.run([VTRAIN, "train", "--data", str(datadir), *MODEL, "--value", "v1",
                        "--steps", "1", "--table-offload"], capture_output=True, text=True, env=ENV)
    assert r.returncode != 0
    assert "--table-offload" in r.stderr and "v1" in r.stderr, r.stderr
