# tests/launch/test_window_results.py owns the checks of scripts/window_results.py: on a synthetic
# numbers.json (fake numbers, never a measurement) in a throw-away repository tree it checks the
# measured column (ops summed into static report rows, unmapped ops listed), the status block of
# docs/status.md (replaced between its markers, nothing else touched, README.md never), the plan
# calibration merge, the refusal and labelling of emulated numbers and the handling of missing
# stages; and, against the real checkout (VTRAIN_ROOT), that the script's op -> row table names
# only rows bench/static_report.py has and only ops the C++ profiles, and covers every one of both.
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
SCRIPT = ROOT / "scripts" / "window_results.py"
LABEL = "EMULATED (not a GPU number)"
GEMM_ROWS = ("GEMM forward (x W)", "GEMM backward dx (dy W^T)", "GEMM backward dW (x^T dy, fp32)")

STATUS = """# fake status page

Some text above.

<!-- gpu-window:begin -->
- an old GPU line that must go
<!-- gpu-window:end -->

## Status
Text below, kept byte for byte.
"""

# A README with markers of its own: the script writes docs/status.md only, never README.md.
README = STATUS.replace("fake status page", "fake README")

# Clearly fake numbers: repeated digits, nothing that could pass for a measurement.
NUMBERS = {
    "schema": 1,
    "date": "2099-01-02T03:04:05Z",
    "emulated": False,
    "device": "FAKE GPU 0",
    "commit": "f00f00f",
    "stages": [{"name": n, "rc": 0, "seconds": 1.0, "status": "ok"}
               for n in ("facts", "attention", "train", "gemm", "torch_peer", "bov", "tests")],
    "facts": {"driver": "0.0", "glibc": "9.99", "ok": True},
    "attention": {"device": "FAKE GPU 0", "windows": {"2048": {
        "fwd_tc_tflops": 333.0, "fwd_ref_tflops": 111.0, "bwd_tc_tflops": 222.0,
        "bwd_ref_tflops": 111.0, "out_max_abs_err": 0.0625, "grad_max_abs_err": 0.125,
        "fwd_v1_tflops": 222.0, "bwd_v1_tflops": 111.0}}},
    "train": {"preset": "d24", "value": "baseline", "micro_batch": 4, "seq_len": 8,
              "global_batch": 64, "steps": 3, "tok_per_s": 1111.0, "mfu": 0.111,
              "peak_device_bytes": 3 * 2**30, "loss_first": 9.5, "loss_last": 8.25,
              "profile_ms_per_step": {"rope_rmsnorm": 1.0, "rope_rmsnorm_backward": 2.0,
                                      "rmsnorm": 4.0,
                                      "gemm": 100.0, "zz_fake_op": 8.0, "sum_squares": 16.0,
                                      "(all ops)": 999.0}},
    "gemm": {"rows": [{"name": "qkv_fwd", "M": 11, "N": 22, "K": 33, "vtrain_tflops": 444.0,
                       "torch_tflops": 888.0},
                      {"name": "fc_fwd", "M": 44, "N": 55, "K": 66, "vtrain_tflops": 555.0,
                       "torch_tflops": 555.0}]},
    # bench_gpu_vs_torch.py --only torch, as the window runs it (the shape of the first real
    # window's file, 2026-11-26): the vtrain side is the train stage's run.
    "torch_peer": {"results": [{"preset": "d24", "mode": "baseline", "batch": 4, "seq_len": 8,
                                "vtrain": {"error": "skipped (--only)"},
                                "torch": {"tok_s": 2222.0, "attn": "flex", "compiled": True,
                                          "peak_bytes": 2 * 2**30},
                                "ratio": None, "vtrain_mfu": None, "torch_mfu": 0.222}]},
    "bov": {"preset": "d24", "value": "bov", "micro_batch": 2, "tok_per_s": 777.0, "mfu": 0.0777,
            "peak_device_bytes": 2**30, "loss_first": 9.0, "loss_last": 8.0},
    "tests": {"passed": 7, "failed": 1, "timed_out": 0},
}


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "bench" / "results").mkdir(parents=True)
    (r / "docs").mkdir()
    (r / "docs" / "status.md").write_text(STATUS)
    (r / "README.md").write_text(README)
    return r


def run(repo, numbers, *args):
    path = repo.parent / "numbers.json"
    path.write_text(json.dumps(numbers))
    return subprocess.run([sys.executable, str(SCRIPT), str(path), "--repo", str(repo), *args],
                          capture_output=True, text=True, timeout=600)


def block_of(text):
    lines = text.splitlines()
    b, e = lines.index("<!-- gpu-window:begin -->"), lines.index("<!-- gpu-window:end -->")
    return lines[:b], lines[b + 1:e], lines[e + 1:]


def results(repo):
    return sorted(p.name for p in (repo / "bench" / "results").iterdir())


def load_script():
    spec = importlib.util.spec_from_file_location("window_results", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# (a)
def test_measured_column_sums_ops_into_rows_and_lists_unmapped(repo):
    r = run(repo, NUMBERS)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((repo / "bench/results/gpu-window-2099-01-02T030405Z-measured.json").read_text())
    # global_batch 64 = 2 micro-steps of 4 x 8: per micro-step, seconds.
    assert m["rope + QK-norm (fused)"] == pytest.approx((1.0 + 2.0) / 1e3 / 2)
    assert m["rmsnorm forward (x)"] == pytest.approx(4.0 / 1e3 / 2)
    assert m["(unmapped) zz_fake_op"] == pytest.approx(8.0 / 1e3 / 2)
    assert m["(unmapped) sum_squares"] == pytest.approx(16.0 / 1e3 / 2)
    # gemm covers several rows: one joined key holding them, no single GEMM row.
    gemm_keys = [k for k in m if "GEMM forward (x W)" in k]
    assert len(gemm_keys) == 1 and all(row in gemm_keys[0] for row in GEMM_ROWS), m
    assert m[gemm_keys[0]] == pytest.approx(100.0 / 1e3 / 2)
    assert not any(k in m for k in GEMM_ROWS)
    assert not any("all ops" in k for k in m), m
    assert len(m) == 5, m
    unmapped = [l for l in r.stdout.splitlines() if "unmapped ops" in l]
    assert unmapped and "zz_fake_op" in unmapped[0] and "sum_squares" in unmapped[0], r.stdout


def test_without_global_batch_profile_is_one_micro_step_and_says_so(repo):
    n = copy.deepcopy(NUMBERS)
    del n["train"]["global_batch"]
    r = run(repo, n)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((repo / "bench/results/gpu-window-2099-01-02T030405Z-measured.json").read_text())
    assert m["rmsnorm forward (x)"] == pytest.approx(4.0 / 1e3)
    assert "train.global_batch" in r.stdout


# (b)
def test_status_block_replaced_between_markers_only(repo):
    r = run(repo, NUMBERS)
    assert r.returncode == 0, r.stdout + r.stderr
    before, after = (block_of(STATUS), block_of((repo / "docs" / "status.md").read_text()))
    assert after[0] == before[0] and after[2] == before[2]
    assert (repo / "docs" / "status.md").read_text().endswith("Text below, kept byte for byte.\n")
    assert (repo / "README.md").read_text() == README  # the block lives in docs/status.md only
    block = "\n".join(after[1])
    assert "old GPU line" not in block
    assert all(l.startswith(("- ", "  - ")) for l in after[1]), block
    for want in ("2099-01-02 03:04:05 UTC", "FAKE GPU 0", "f00f00f", "1,111 tok/s", "MFU 11.1%",
                 "peak 3.0 GiB", "9.500 -> 8.250", "d24 bov", "777 tok/s",
                 "forward 333.0 vs 111.0 (3.00x)", "backward 222.0 vs 111.0 (2.00x)",
                 "forward v1 222.0 (new 1.50x)", "backward v1 111.0 (new 2.00x)", "out 0.062", "grads 0.12", "qkv_fwd 11x22x33: 444 vs 888 (0.50x)",
                 "fc_fwd 44x55x66: 555 vs 555 (1.00x)", "(0.50x), MFU 11.1% vs 22.2%",
                 "7 passed, 1 failed, 0 timed out"):
        assert want in block, f"{want!r} not in\n{block}"
    assert LABEL not in block
    # A second run gives the same file (only the block changes).
    first = (repo / "docs" / "status.md").read_text()
    assert run(repo, NUMBERS).returncode == 0
    assert (repo / "docs" / "status.md").read_text() == first


def test_status_without_markers_is_left_alone_and_block_printed(repo):
    (repo / "docs" / "status.md").write_text("# no markers here\n")
    r = run(repo, NUMBERS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (repo / "docs" / "status.md").read_text() == "# no markers here\n"
    assert (repo / "README.md").read_text() == README  # markers there are not a fallback
    assert "1,111 tok/s" in r.stdout and "NOT updated" in r.stdout


def test_malformed_markers_fail_and_leave_status(repo):
    text = STATUS.replace("<!-- gpu-window:end -->\n", "")
    (repo / "docs" / "status.md").write_text(text)
    r = run(repo, NUMBERS)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (repo / "docs" / "status.md").read_text() == text
    assert "malformed" in r.stdout


# (c)
def test_calibration_merges_presets_newest_wins(repo):
    cal = repo / "bench/results/plan_calibration.json"
    cal.write_text(json.dumps({
        "schema": 1, "source": "gpu-window", "date": "2098-01-01T00:00:00Z", "device": "OLD",
        "commit": "0ld", "presets": {
            "d32": {"mfu": 0.333, "tok_per_s": 3.0, "date": "2098-01-01T00:00:00Z"},
            "d24": {"mfu": 0.999, "tok_per_s": 9.0, "date": "2098-01-01T00:00:00Z"}},
        "gemm_tflops": [{"M": 11, "N": 22, "K": 33, "tflops": 1.0, "date": "2098-01-01T00:00:00Z"},
                        {"M": 1, "N": 2, "K": 3, "tflops": 2.0, "date": "2098-01-01T00:00:00Z"}],
        "note": "x"}))
    r = run(repo, NUMBERS)
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads(cal.read_text())
    assert c["schema"] == 1 and c["source"] == "gpu-window"
    assert (c["date"], c["device"], c["commit"]) == ("2099-01-02T03:04:05Z", "FAKE GPU 0",
                                                     "f00f00f")
    assert c["presets"]["d32"]["mfu"] == 0.333                      # other preset kept
    d24 = c["presets"]["d24"]                                        # newer window wins
    assert (d24["mfu"], d24["tok_per_s"], d24["micro_batch"], d24["seq_len"],
            d24["peak_device_bytes"]) == (0.111, 1111.0, 4, 8, 3 * 2**30)
    assert c["presets"]["d24:bov"]["tok_per_s"] == 777.0
    shapes = {(g["M"], g["N"], g["K"]): g["tflops"] for g in c["gemm_tflops"]}
    assert shapes == {(11, 22, 33): 444.0, (44, 55, 66): 555.0, (1, 2, 3): 2.0}
    assert "vtrain plan --calibrate" in c["note"] and "--preset" in c["note"]

    # An older window does not overwrite the newer entries.
    old = copy.deepcopy(NUMBERS)
    old["date"] = "2097-01-01T00:00:00Z"
    old["train"]["mfu"] = 0.5
    old["gemm"]["rows"][0]["vtrain_tflops"] = 1.5
    r = run(repo, old)
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads(cal.read_text())
    assert c["presets"]["d24"]["mfu"] == 0.111
    assert {(g["M"], g["N"], g["K"]): g["tflops"] for g in c["gemm_tflops"]}[(11, 22, 33)] == 444.0
    assert c["date"] == "2099-01-02T03:04:05Z"
    assert "kept d24" in r.stdout


# (d)
@pytest.mark.parametrize("change", [{"emulated": True}, {"emulated": None},
                                    {"emulated": False, "device": "CUDA emulation"}])
def test_emulated_input_refused_without_flag(repo, change):
    n = copy.deepcopy(NUMBERS)
    n.update(change)
    if change.get("emulated", False) is None:
        del n["emulated"]
    r = run(repo, n)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--allow-emulated" in r.stderr, r.stderr
    assert results(repo) == []
    assert (repo / "docs" / "status.md").read_text() == STATUS


def test_emulated_input_labelled_with_flag(repo):
    n = copy.deepcopy(NUMBERS)
    n.update(emulated=True, device="CUDA emulation")
    r = run(repo, n, "--allow-emulated")
    assert r.returncode == 0, r.stdout + r.stderr
    assert results(repo) == ["gpu-window-2099-01-02T030405Z-EMULATED-measured.json",
                             "plan_calibration-EMULATED.json"]
    m = json.loads((repo / "bench/results" / results(repo)[0]).read_text())
    assert m and all(k.startswith(LABEL) for k in m), m
    c = json.loads((repo / "bench/results/plan_calibration-EMULATED.json").read_text())
    assert c["source"] == LABEL and LABEL in c["note"]
    assert all(e["label"] == LABEL for e in [*c["presets"].values(), *c["gemm_tflops"]]), c
    _, block, _ = block_of((repo / "docs" / "status.md").read_text())
    top = [l for l in block if l.startswith("- ")]
    assert top and all(l.startswith(f"- {LABEL}: ") for l in top), block
    assert all(l.startswith(f"[{LABEL}]") for l in r.stdout.splitlines() if l.strip()
               and not l.startswith(("- ", "  - ", "{", "}", " \""))), r.stdout


# (e)
def test_missing_stages_still_write_and_name_what_is_missing(repo):
    n = copy.deepcopy(NUMBERS)
    for name in ("train", "gemm", "attention", "tests"):
        del n[name]
    status = {"train": "timeout", "gemm": "failed", "attention": "skipped"}
    n["stages"] = [s for s in n["stages"] if s["name"] != "tests"]
    for s in n["stages"]:
        s["status"] = status.get(s["name"], s["status"])
    r = run(repo, n)
    assert r.returncode == 0, r.stdout + r.stderr
    _, block, _ = block_of((repo / "docs" / "status.md").read_text())
    block = "\n".join(block)
    for want in ("not measured (stage train: timeout)", "not measured (stage gemm: failed)",
                 "not measured (stage attention: skipped)", "not measured (stage tests: no record)",
                 "777 tok/s",
                 # the peer's vtrain side is the train stage's run: without it, no ratio
                 "vtrain ? vs torch 2,222 tok/s (?x)"):
        assert want in block, f"{want!r} not in\n{block}"
    for want in ("train: not measured (stage train: timeout)", "torch_peer.results[0].vtrain",
                 "gemm: not measured (stage gemm: failed)"):
        assert want in r.stdout, r.stdout
    assert results(repo) == ["plan_calibration.json"]  # no profile: no measured column
    assert "measured column: not written" in r.stdout
    c = json.loads((repo / "bench/results/plan_calibration.json").read_text())
    assert list(c["presets"]) == ["d24:bov"] and c["gemm_tflops"] == []


def test_nearly_empty_numbers_still_write_the_block(repo):
    r = run(repo, {"schema": 1, "emulated": False})
    assert r.returncode == 0, r.stdout + r.stderr
    _, block, _ = block_of((repo / "docs" / "status.md").read_text())
    assert "undated" in block[0] and block.count("") == 0
    assert sum("not measured (stage" in l for l in block) == 6, block  # all but facts
    assert results(repo) == []
    for want in ("date", "device", "commit", "facts: not measured (stage facts: no record)"):
        assert f"  - {want}" in r.stdout, r.stdout


def test_dry_run_writes_nothing(repo):
    r = run(repo, NUMBERS, "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert results(repo) == []
    assert (repo / "docs" / "status.md").read_text() == STATUS
    assert "would write" in r.stdout and "plan_calibration.json" in r.stdout
    assert "1,111 tok/s" in r.stdout


# The table against the real sources, so it cannot rot.
def static_report_rows():
    src = (ROOT / "bench" / "static_report.py").read_text()
    rows = set(re.findall(r'\b(?:add|Row)\(\s*"([^"]+)"', src))
    assert len(rows) >= 15, f"too few rows parsed from static_report.py: {rows}"
    return rows


def profiled_op_names():
    # The op families' dispatch (src/core/ops/*.cc; ops.cc keeps copy_2d): on("name", ...), or
    # the name given to a family's shared dispatch (activation.cc's act_forward/act_backward).
    ops = set()
    for f in [ROOT / "src/core/ops.cc", *sorted((ROOT / "src/core/ops").glob("*.cc"))]:
        ops.update(re.findall(r'\b(?:on|act_forward<\w+>|act_backward<\w+>)\("([A-Za-z0-9_]+)"',
                              f.read_text()))
    assert {"gemm", "attention", "rmsnorm"} <= ops, ops
    for f in (ROOT / "src").rglob("*.cc"):
        for line in f.read_text().splitlines():
            if "op_profile::Scope" in line:
                ops.update(re.findall(r'"([A-Za-z0-9_]+)"', line))
    return ops


def test_mapping_rows_exist_in_static_report_and_cover_it():
    table = load_script().OP_TO_ROWS
    rows = static_report_rows()
    named = {r for rs in table.values() for r in rs}
    assert named - rows == set(), f"rows not in bench/static_report.py: {named - rows}"
    assert rows - named == set(), f"static report rows no profile op maps to: {rows - named}"


def test_mapping_ops_are_the_profiled_ops():
    table = load_script().OP_TO_ROWS
    ops = profiled_op_names()
    assert set(table) - ops == set(), f"ops in the table that nothing profiles: {set(table) - ops}"
    assert ops - set(table) == set(), (f"profiled ops missing from OP_TO_ROWS (map them, or () "
                                       f"for no static report row): {ops - set(table)}")
