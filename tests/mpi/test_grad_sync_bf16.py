"""`vtrain train --grad-sync bf16`: the data-parallel gradient sum with a bf16 wire format and fp32
additions (docs/design.md "Parallelism"). A dp 2 run on the CPU (MPI's user-defined bf16 op)
trains: finite losses that fall. Step 1's loss, computed before any update, equals the fp32 run's;
the later losses differ (the wire rounds) and stay within BOUND of the fp32 run's. The banner's
payload per step is half the fp32 one. With dp 1 the gradient is rounded too (the same rounding on
every data-parallel size), so a dp 1 bf16 run differs from a dp 1 fp32 run after step 1. With 2
ranks the overlapped, blocking and emulated-device paths give the same floats. The option is
recorded with the run (checkpoint metadata), and a resume that changes it says so."""
import json
import re
import subprocess

import h5py
import numpy as np

# The emulated-device layout tests' runner and data: a 4-layer d64 model, 4 micro-batches of 2 x
# 32 tokens per step, seed 3.
from test_device_layouts import ENV, MICRO, MODEL, SEQ, VTRAIN, datadir, train  # noqa: F401

STEPS = 40
# Each gradient element is rounded twice (its rank's value, then the sum), each time by at most
# 2^-8 of itself: a perturbation of under 1% of each step's gradient. The tolerance chosen for
# 40 steps of this small model is 0.1% of the loss (BOUND), a tenth of that; measured: 3e-5 at
# most (30 times inside). Over 200 steps of --preset tiny the runs drift apart as any two
# trajectories do: 1.1% at most (docs/design.md "Parallelism").
BOUND = 1e-3


def payload_mb(stdout):
    m = re.search(r"data-parallel gradient sum: (\w+) wire, ([0-9.]+) MB per step and rank"
                  r"(?: \(fp32: ([0-9.]+) MB)?", stdout)
    assert m, stdout[-2000:]
    return m.group(1), float(m.group(2)), m.group(3) and float(m.group(3))


def test_dp2_bf16_wire_trains_close_to_fp32(datadir, tmp_path):
    f32, _, out32 = train(datadir, tmp_path / "f32", "bov", 2, 1, 1, "cpu", steps=STEPS)
    b16, _, out16 = train(datadir, tmp_path / "b16", "bov", 2, 1, 1, "cpu", steps=STEPS,
                          extra=["--grad-sync", "bf16"])
    assert len(b16) == len(f32) == STEPS
    assert np.all(np.isfinite(b16)), b16
    # Trains: the last 5 steps' mean loss is well below the first step's.
    assert b16[-5:].mean() < b16[0] - 0.5, b16
    assert b16[0] == f32[0]
    assert not np.array_equal(b16[1:], f32[1:]), "the bf16 wire changed nothing"
    diff = np.abs(b16 - f32)
    assert np.all(diff <= BOUND * f32), (diff.max(), diff, f32)
    wire32, mb32, _ = payload_mb(out32)
    wire16, mb16, mb16_as_f32 = payload_mb(out16)
    assert (wire32, wire16) == ("fp32", "bf16")
    assert mb16_as_f32 == mb32 and abs(mb16 - mb32 / 2) <= 0.001, (mb16, mb32)


def test_dp1_bf16_wire_rounds(datadir, tmp_path):
    f32, _, _ = train(datadir, tmp_path / "f32", "baseline", 1, 1, 1, "cpu", steps=3)
    b16, _, out = train(datadir, tmp_path / "b16", "baseline", 1, 1, 1, "cpu", steps=3,
                        extra=["--grad-sync", "bf16"])
    assert "bf16 wire" in out
    # The option is one of the run's recorded options (the checkpoint's metadata).
    with h5py.File(tmp_path / "b16" / "ckpt" / "step_00000003.h5", "r") as f:
        assert json.loads(f.attrs["extra"])["grad_sync"] == "bf16"
    assert b16[0] == f32[0]
    assert not np.array_equal(b16, f32), "dp 1 with --grad-sync bf16 did not round"
    assert np.all(np.abs(b16 - f32) <= BOUND * f32)


def test_dp2_bf16_wire_same_bits_on_every_path(datadir, tmp_path):
    """With 2 ranks the bf16 sum has one order of additions, so the paths give the same floats:
    the CPU store's non-blocking sums (packed on the host, MPI_Iallreduce), the same run without
    overlap (blocking MPI_Allreduce), and the emulated device's (cast on the device, staged
    through host memory); f32 activations, where the emulated device computes the CPU's floats."""
    flags = ["--grad-sync", "bf16", "--act-dtype", "f32"]
    cpu, _, _ = train(datadir, tmp_path / "cpu", "bov", 2, 1, 1, "cpu", extra=flags)
    blocking, _, _ = train(datadir, tmp_path / "blk", "bov", 2, 1, 1, "cpu",
                           extra=flags + ["--no-overlap-grad-sync"])
    emu, _, _ = train(datadir, tmp_path / "emu", "bov", 2, 1, 1, "emulated", extra=flags)
    f32, _, _ = train(datadir, tmp_path / "f32", "bov", 2, 1, 1, "cpu", extra=["--act-dtype", "f32"])
    assert not np.array_equal(cpu, f32)
    assert np.array_equal(blocking, cpu), (blocking, cpu)
    assert np.array_equal(emu, cpu), (emu, cpu)


def test_resume_with_another_wire_is_noted(datadir, tmp_path):
    """A run stopped after step 1 with the fp32 wire resumes with --grad-sync bf16: allowed,
    and said (the options that change a run's course are compared with the checkpoint's)."""
    cmd = [VTRAIN, "train", "--data", str(datadir), *MODEL, "--value", "baseline", "--micro-batch",
           str(MICRO), "--global-batch", str(4 * MICRO * SEQ), "--steps", "3", "--eval-tokens",
           "1024", "--final-eval-tokens", "0", "--seed", "3", "--ckpt-dir", str(tmp_path / "ckpt"),
           "--resume", "auto"]
    r = subprocess.run(cmd + ["--stop-at-step", "1"], capture_output=True, text=True, env=ENV,
                       timeout=600)
    assert r.returncode == 75, r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run(cmd + ["--grad-sync", "bf16"], capture_output=True, text=True, env=ENV,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 'grad_sync "fp32" -> "bf16"' in r.stdout, r.stdout[-2000:]
