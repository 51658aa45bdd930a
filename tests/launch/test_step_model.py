# tests/launch/test_step_model.py owns the checks of bench/step_model.py, the step model
# calibrated on the 2026-11-26 GPU window: its stored constants are what the fit gives, the rows it
# was not fitted on are predicted within the issue's 10%, the window's step is reproduced, its
# inventory of today's kernels moves the bytes bench/static_report.py counts, and its two regimes
# (a latency-bound scalar kernel, a bandwidth-bound one) behave as the law says.
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "bench"))
import static_report as sr  # noqa: E402
import step_model as sm  # noqa: E402


def test_stored_calibration_is_what_the_fit_gives():
    cal, facts = sm.fit_window()
    stored = sm.CALIBRATION
    assert len(facts["rows"]) >= 8, facts["rows"]
    for field in ("lat_dram", "eta", "ns_tflops", "host_op"):
        got, want = getattr(cal, field), getattr(stored, field)
        assert abs(got / want - 1.0) < 0.005, f"{field}: refit {got}, stored {want}"


def test_rows_the_fit_never_saw_are_within_ten_percent():
    rep = sm.reproduction()
    checked = [d for d in rep if d["how"] in ("attention stage's TFLOP/s",
                                               "HBM constants (not fitted on it)")]
    assert len(checked) == 3, [d["row"] for d in checked]
    for d in checked:
        assert abs(d["error"]) <= sm.TOLERANCE, d


def test_window_step_is_reproduced():
    c = sm.d24_window_preset()
    p = sm.step_prediction(sm.window_code_kernels(c), c, sm.H200, sm.CALIBRATION, sm.window_rates())
    assert abs(p["outside_s"] / sm.WINDOW_OUTSIDE_S - 1.0) < 0.01, p["outside_s"]  # fitted on it
    assert abs(p["step_s"] / sm.WINDOW_STEP_S - 1.0) < 0.05, p["step_s"]
    # Every row the window measured has kernels in the inventory (nothing measured is unmodelled).
    rows = {k.row for k in sm.window_code_kernels(c)}
    assert set(sm.load_measured()) <= rows, set(sm.load_measured()) - rows


def test_todays_inventory_moves_the_static_reports_bytes():
    for preset, mb in (("d24", 16), ("d32", 8)):
        c = sr.preset(preset, mb)
        static = {r.name: r for r in sr.step_rows(c, False)}
        ks = sm.current_code_kernels(c, 1)
        for name in ("residual add + rmsnorm forward (fused)", "rmsnorm forward (x)",
                     "rmsnorm backward (x)", "rope + QK-norm (fused)", "relu^2 forward + backward",
                     "residual adds (axpy)", "embedding gather + scatter-add",
                     "cross entropy forward + backward (fused)"):
            mine = sum(k.calls * k.bytes for k in ks if k.row == name)
            assert math.isclose(mine, static[name].bytes, rel_tol=1e-3), (preset, name, mine,
                                                                          static[name].bytes)
        gemm = sum(k.calls * k.flops for k in ks if k.kind == "gemm")
        want = sum(static[n].flops for n in ("GEMM forward (x W)", "GEMM backward dx (dy W^T)",
                                             "GEMM backward dW (x^T dy, fp32)"))
        assert math.isclose(gemm, want, rel_tol=1e-3), (preset, gemm, want)


def test_host_gaps_come_from_ops_shorter_than_their_issue():
    cal, dev = sm.CALIBRATION, sm.H100
    short = sm.Kernel("r", "tiny", 100, "memset", bytes=1024)
    long_ = sm.Kernel("r", "large", 100, "memset", bytes=1 << 32)
    gap = sm.host_gaps([short], dev, cal, sm.Rates())
    assert math.isclose(gap, 100 * (cal.host_op - sm.predict_call(short, dev, cal, sm.Rates())))
    assert sm.host_gaps([long_], dev, cal, sm.Rates()) == 0.0


def test_latency_bound_and_bandwidth_bound_kernels():
    cal, dev = sm.CALIBRATION, sm.H100
    n = 1 << 26
    scalar = sm.stream_kernel("r", "one 2-byte load a thread", 1, n, 4)
    t = sm.predict_call(scalar, dev, cal, sm.Rates())
    # Little's law: 2048 threads x 2 bytes in flight per SM do not reach the bandwidth cap; the
    # time is the waves' round trips.
    waves = math.ceil(scalar.blocks / (dev.sms * scalar.resident(dev)))
    assert math.isclose(t, waves * cal.lat_dram, rel_tol=1e-9)
    assert scalar.bytes / t < 0.8 * cal.eta * dev.hbm
    # Twice the round trips per thread: twice the time, while latency-bound.
    slow = sm.Kernel("r", "two trips", 1, "mem", bytes=scalar.bytes, blocks=scalar.blocks,
                     dram_trips=2)
    assert math.isclose(sm.predict_call(slow, dev, cal, sm.Rates()), 2 * t, rel_tol=1e-9)
    # 16 bytes a thread in flight (a uint4 of 8 bf16) over far fewer waves: the cap.
    wide = sm.Kernel("r", "uint4 a thread", 1, "mem", bytes=scalar.bytes,
                     blocks=math.ceil(n / 8 / 256), dram_trips=1)
    tw = sm.predict_call(wide, dev, cal, sm.Rates())
    assert math.isclose(wide.bytes / tw, cal.eta * dev.hbm, rel_tol=1e-9)


def test_cli_labels_predictions():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "step_model.py")],
                         capture_output=True, text=True, check=True).stdout
    assert "Reproduction of the 2026-11-26 window" in out
    assert "PREDICTED for today's code (not measured)" in out
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "step_model.py"), "--kernels", "d32"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("PREDICTED (step model")
    assert "xent_loss_grad_kernel" in out


def test_batched_newton_schulz_inventory():
    # Every matrix in exactly one batch, a batch of one shape within one round, a round within
    # the cap (src/optim/distributed_optimizer.cc plan_muon_rounds, one owner).
    for preset, mb in (("d24", 16), ("d32", 8)):
        c = sr.preset(preset, mb)
        mats = sr.block_matrices(c)
        batches = sm.muon_rounds(mats, list(range(len(mats))))
        assert sorted(k for b in batches for k in b) == list(range(len(mats)))
        for b in batches:
            assert len({mats[k] for k in b}) == 1, b
            assert b == sorted(b)
            if len(b) > 1:
                assert sum(mats[k][0] * mats[k][1] for k in b) <= sm.NS_BATCH_ELEMENTS
        # Batching moves no FLOPs: the batched GEMMs do the per-matrix iterations' work.
        ks = sm.current_code_kernels(c, 1)
        ns = sum(k.calls * k.flops for k in ks if k.kind == "ns_batch")
        assert math.isclose(ns, sum(sr.ns_cost(*m)[0] for m in mats), rel_tol=1e-9), preset
        # 15 GEMMs a batch, not 15 a matrix.
        assert sum(k.calls for k in ks if k.kind == "ns_batch") == 15 * len(batches)
    c = sr.preset("d24", 16)
    assert len(sm.muon_rounds(sr.block_matrices(c), list(range(144)))) == 32
    # The assumed batched rate is a d24 layer GEMM rate the window measured (a prediction), above
    # the one-matrix rate fitted on the window.
    rate = sm.ns_batched_tflops(sm.window_rates())
    assert min(sm.WINDOW_GEMM_TFLOPS.values()) <= rate <= max(sm.WINDOW_GEMM_TFLOPS.values())
    assert rate > sm.CALIBRATION.ns_tflops
