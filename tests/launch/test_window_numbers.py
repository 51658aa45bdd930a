# tests/launch/test_window_numbers.py owns the check of scripts/window_numbers.py's reading of the
# `--profile` table (src/core/op_profile.cc report): ms and calls per step of each op, the time
# outside the ops and the clock, from a table in the exact layout the report prints; the whole
# window's reading of a real table runs in test_device_window.py.
import importlib.util
import os
from pathlib import Path

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
spec = importlib.util.spec_from_file_location("window_numbers", ROOT / "scripts" / "window_numbers.py")
wn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wn)


def table(rows, outside):
    head = ("op profile of rank 0 over 19 step(s) (the first step and evaluations left out; device "
            "ops timed by CUDA events, host ops by the host clock; ms per step):\n"
            f"{'op':<24} {'calls':>9} {'ms':>10} {'share':>7} {'GFLOP/s':>9}\n")
    body = "".join(f"{op:<24} {calls:9.1f} {ms:10.2f} {5.0:6.1f}% {'':>9}\n"
                   for op, calls, ms in rows)
    tail = (f"{'(all ops)':<24} {'':>9} {sum(r[2] for r in rows):10.2f} {90.0:6.1f}%\n"
            f"{'(outside the ops)':<24} {'':>9} {outside:10.2f} {10.0:6.1f}%\n")
    return "some log line\n" + head + body + tail + "after the table\n"


def test_profile_keeps_calls_and_the_time_outside_the_ops():
    frag = wn.parse_profile(table([("gemm", 434.0, 235.61), ("tensor_copy", 1801.5, 16.63)], 40.8))
    assert frag["profile_ms_per_step"] == {"gemm": 235.61, "tensor_copy": 16.63}
    assert frag["profile_calls_per_step"] == {"gemm": 434.0, "tensor_copy": 1801.5}
    assert frag["profile_outside_ms_per_step"] == 40.8
    assert frag["profile_clock"] == "device events"


def test_the_first_table_is_read_and_no_table_is_nothing():
    text = table([("gemm", 1.0, 2.0)], 1.0) + table([("axpy", 3.0, 4.0)], 0.5)
    frag = wn.parse_profile(text)
    assert frag["profile_ms_per_step"] == {"gemm": 2.0}
    assert frag["profile_calls_per_step"] == {"gemm": 1.0}
    assert frag["profile_outside_ms_per_step"] == 1.0
    assert wn.parse_profile("no profile here\n") == {}
