"""The GPU window rehearsed on the CUDA emulation (scripts/device_window.sh, docs/gpu-session.md).

The bundle is made from this build (scripts/device_bundle.sh with VTRAIN_BUNDLE_EMULATED=1: the
same packing, MANIFEST and wrappers as the real one), then the window runs as it would on a lent
GPU machine, at tiny shapes:
- every stage, end to end: exit 0, exactly summary.txt, numbers.json and logs.tar.gz in $OUT, the
  summary printed last and labelled EMULATED, the numbers each stage must produce;
- in a mount namespace that hides this machine's Open MPI, HDF5, OpenBLAS and abseil
  (scripts/without_system_libs.sh): the system build no longer starts there, the bundle does;
- faults: a hung stage is cut at its limit, a failing one is recorded, a hung test binary is cut
  at its own limit while the others run, and the stages after them still run; exit 1;
- the deadline: a stage that no longer fits is skipped, not started;
- an unusable bundle: exit 2 and still a summary.
The window's limits are wall-clock limits made for a GPU machine; here every stage, test binary
and the deadline get limits no busy machine reaches (GENEROUS), except the ones a test cuts on
purpose, and those only on programs that hang: no outcome depends on how busy the machine is.
Skipped where the build has no emulated CUDA path (VTRAIN_CUDA off)."""
import json
import os
import shutil
import subprocess
import sys
import re
import tarfile
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("VTRAIN_BUILD", ROOT / "build"))
WINDOW = ROOT / "scripts" / "device_window.sh"
STAGES = ["facts", "attention", "train", "tests", "gemm", "torch_peer", "graphs", "fp8", "bov",
          "cli"]
GPU_TEST_BINARIES = sorted(p.stem for p in (ROOT / "tests" / "gpu").glob("*_test.cc"))

# Limits a busy 2-core machine stays far below (the defaults are a GPU machine's: 60 s a test
# binary, 540 s in all); a test that cuts something on purpose overrides the one it needs.
GENEROUS = {"WINDOW_DEADLINE": 7200, "WINDOW_TEST_LIMIT": 1200,
            "WINDOW_LIMITS": ",".join(f"{s}=3600" for s in STAGES)}

if not (BUILD / "gemm_bench").exists():
    pytest.skip("no CUDA build here (gemm_bench missing): the window has nothing to run",
                allow_module_level=True)


def has_torch():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    env = dict(os.environ, VTRAIN_BUNDLE_EMULATED="1", VTRAIN_DEVICE_BUILD=str(BUILD),
               VTRAIN_BUNDLE_OUT=str(out))
    r = subprocess.run(["bash", str(ROOT / "scripts" / "device_bundle.sh")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    path = out / "root.tar.gz"
    with tarfile.open(path) as t:
        manifest = t.extractfile("root/MANIFEST").read().decode()
    assert "emulated 1" in manifest and "needs_glibc 2." in manifest, manifest[:500]
    return path


def window(tmp_path, bundle_path, wrap=(), **env_extra):
    """Runs the window with the GENEROUS limits (env_extra overrides them; WINDOW_LIMITS given
    there come after the generous ones, so they win); returns (exit code, stdout, OUT dir,
    numbers or None)."""
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), WINDOW_BUNDLE=str(bundle_path),
               WINDOW_WORK=str(tmp_path / "work"), WINDOW_PYTHON=sys.executable)
    env.update({k: str(v) for k, v in GENEROUS.items()})
    if "WINDOW_LIMITS" in env_extra:
        env_extra = dict(env_extra, WINDOW_LIMITS=f"{GENEROUS['WINDOW_LIMITS']},{env_extra['WINDOW_LIMITS']}")
    env.update({k: str(v) for k, v in env_extra.items()})
    r = subprocess.run([*wrap, "bash", str(WINDOW)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=14400)
    numbers = None
    if (out / "numbers.json").exists():
        numbers = json.loads((out / "numbers.json").read_text())
    return r.returncode, r.stdout + r.stderr, out, numbers


def not_ok(binaries, but=()):
    """{binary: status} of the test binaries that did not pass (leaving out `but`)."""
    return {k: v["status"] for k, v in binaries.items() if k not in but and v["status"] != "ok"}


def status(numbers):
    return {s["name"]: s["status"] for s in numbers["stages"]}


def modified_bundle(tmp_path, bundle_path, scripts):
    """A copy of the bundle with some programs replaced by shell scripts {path in root: text}."""
    work = tmp_path / "modbundle"
    work.mkdir()
    with tarfile.open(bundle_path) as t:
        t.extractall(work)
    for rel, text in scripts.items():
        p = work / "root" / rel
        assert p.exists(), rel
        p.unlink()
        p.write_text(text)
        p.chmod(0o755)
    path = tmp_path / "mod.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        t.add(work / "root", arcname="root")
    return path


def test_window_end_to_end_on_the_emulation(tmp_path, bundle):
    rc, log, out, num = window(tmp_path, bundle)
    assert rc == 0, log[-4000:]
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "numbers.json", "summary.txt"]
    summary = (out / "summary.txt").read_text()
    # The summary is what the call prints last, and it says these are not GPU numbers.
    assert log.rstrip().endswith(summary.rstrip())
    assert "EMULATED" in summary.splitlines()[0]
    assert num["emulated"] is True and num["schema"] == 1
    st = status(num)
    assert list(st) == STAGES, st
    expected = {s: "ok" for s in STAGES}
    if not has_torch():
        expected["torch_peer"] = "skipped"
    assert st == expected, summary
    f = num["facts"]
    assert f["libs_ok"] == "yes" and f["abi_ok"] == "ok", f
    assert f["devices"] == "ok" and f["mpirun_devices"] == "ok", f
    for w, r in num["attention"]["windows"].items():
        # bf16 tensor-core vs reference kernels on the same inputs: close, not equal.
        assert 0 <= r["out_rel_err"] < 0.05 and 0 <= r["grad_rel_err"] < 0.05, (w, r)
    for run in ("train", "bov", "fp8"):
        t = num[run]
        assert t["steps"] == 20 and t["loss_last"] < t["loss_first"] - 0.5, t
        assert t["tok_per_s"] > 0 and t["profile_ms_per_step"].get("gemm", 0) > 0, t
        # Calls per op and the time outside the ops: what bench/step_model.py calibrates on.
        assert t["profile_calls_per_step"].get("gemm", 0) > 0, t
        assert t["profile_outside_ms_per_step"] >= 0, t
    assert num["bov"]["value"] == "bov" and num["train"]["value"] == "baseline"
    assert "--fp8 e4m3 " in summary and "x train's bf16" in summary, summary
    # The graphs stage: the train run without --profile under each --cuda-graphs mode.
    assert sorted(num["graphs"]) == ["micro-step", "off", "step"], num["graphs"]
    for g, t in num["graphs"].items():
        assert t["steps"] == 20 and t["tok_per_s"] > 0 and "profile_ms_per_step" not in t, (g, t)
    assert num["graphs"]["step"]["losses"] == num["graphs"]["off"]["losses"], num["graphs"]
    assert "--cuda-graphs off" in summary and "step " in summary, summary
    tests = num["tests"]
    assert sorted(tests["binaries"]) == GPU_TEST_BINARIES
    assert not not_ok(tests["binaries"]), f"test binaries not ok: {not_ok(tests['binaries'])}"
    assert tests["failed"] == 0 and tests["passed"] >= len(GPU_TEST_BINARIES) - 1, tests
    names = [r["name"] for r in num["gemm"]["rows"]]
    assert len(names) == 15 and "lm_head.dW" in names and num["gemm"]["all_tflops"] >= 0
    assert num["cli"]["passed"] == 1 and num["cli"]["failed"] == 0, num["cli"]
    with tarfile.open(out / "logs.tar.gz") as t:
        members = set(t.getnames())
    for s in STAGES:
        assert f"logs/{s}.log" in members, s
    assert "logs/tests/attention_tc_test.log" in members
    # What the numbers feed (scripts/window_results.py) reads this numbers.json, refuses it as
    # emulated, and with --allow-emulated labels everything it would write.
    results = [sys.executable, str(ROOT / "scripts" / "window_results.py"), str(out / "numbers.json"),
               "--repo", str(ROOT), "--dry-run"]
    r = subprocess.run(results, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "emulated" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run(results + ["--allow-emulated"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "EMULATED (not a GPU number): attention forward" in r.stdout
    assert "would write" in r.stdout and "plan_calibration-EMULATED.json" in r.stdout


def test_window_in_a_namespace_without_the_system_libraries(tmp_path, bundle):
    hide = ["bash", str(ROOT / "scripts" / "without_system_libs.sh")]
    probe = subprocess.run([*hide, str(BUILD / "vtrain"), "--help"], capture_output=True,
                           text=True, timeout=120)
    if probe.returncode == 3:
        pytest.skip(f"mount namespaces are not permitted here: {probe.stderr.strip()}")
    # The libraries are really hidden: the system build cannot start.
    assert probe.returncode != 0, probe.stdout[-500:]
    assert "file too short" in probe.stderr or "cannot open" in probe.stderr, probe.stderr[-500:]
    rc, log, out, num = window(tmp_path, bundle, wrap=hide,
                               WINDOW_STAGES="facts,attention,train,tests,gemm")
    assert rc == 0, log[-4000:]
    assert all(v == "ok" for v in status(num).values()), status(num)
    assert not not_ok(num["tests"]["binaries"]), f"not ok: {not_ok(num['tests']['binaries'])}"
    assert num["facts"]["libs_ok"] == "yes" and num["facts"]["mpirun_devices"] == "ok"
    assert num["train"]["loss_last"] < num["train"]["loss_first"]


def test_window_survives_hangs_and_failures(tmp_path, bundle):
    hang = "#!/bin/sh\nsleep 1000\n"
    hung_test = ("#!/bin/sh\ncase \"$*\" in *list_tests*) printf 'Fake.\\n  hang\\n'; exit 0;; "
                 "esac\nsleep 1000\n")
    mod = modified_bundle(tmp_path, bundle, {
        "usr/bin/attention_bench": hang,                 # a stage that hangs
        "usr/bin/gemm_bench": "#!/bin/sh\nexit 3\n",     # a stage that fails
        "tests/rope_test": hung_test,                    # one test binary that hangs
    })
    # Only what hangs gets a short limit: the hung stage (6 s) and the hung binary (6 s of its
    # own); every other binary and stage has the generous limits.
    rc, log, out, num = window(tmp_path, mod, WINDOW_STAGES="attention,gemm,tests,train",
                               WINDOW_LIMITS="attention=6", WINDOW_TEST_LIMITS="rope_test=6")
    assert rc == 1, log[-4000:]
    st = status(num)
    assert st == {"attention": "timeout", "gemm": "failed", "tests": "failed", "train": "ok"}, st
    bins = num["tests"]["binaries"]
    assert bins["rope_test"]["status"] == "timeout", bins["rope_test"]
    assert not not_ok(bins, but=["rope_test"]), f"test binaries not ok: {not_ok(bins, ['rope_test'])}"
    assert "stage attention (limit 6s" in log and "stage attention: timeout" in log, log[-3000:]
    assert num["train"]["loss_last"] < num["train"]["loss_first"]
    assert "not ok: attention, gemm, tests" in (out / "summary.txt").read_text()


def test_window_skips_what_the_deadline_cannot_fit(tmp_path, bundle):
    # 15 s of the deadline are kept for the summary and the packing, and a stage starts only with
    # 10 s left: a hung attention stage (its own limit 3600 s) is cut by the 90 s deadline, and
    # train, which no longer fits, is skipped rather than started. (The unpacking before the
    # first stage may take up to 65 s of the 90 on a busy machine; the hang outlasts any.)
    mod = modified_bundle(tmp_path, bundle, {"usr/bin/attention_bench": "#!/bin/sh\nsleep 1000\n"})
    rc, log, out, num = window(tmp_path, mod, WINDOW_STAGES="attention,train", WINDOW_DEADLINE=90)
    assert rc == 1, log[-3000:]
    st = status(num)
    assert st == {"attention": "timeout", "train": "skipped"}, (st, log[-3000:])
    lim = int(re.search(r"stage attention \(limit (\d+)s", log).group(1))
    assert lim <= 90 - 15, log[-3000:]  # the deadline's limit, not the stage's 3600 s
    assert "stage train: skipped (the deadline leaves" in log


def test_window_unpacks_an_xz_bundle_where_xz_is_broken(tmp_path, bundle):
    # A bundle packed with xz on a machine whose xz does not work: python's tarfile unpacks it.
    work = tmp_path / "x"
    work.mkdir()
    with tarfile.open(bundle) as t:
        t.extractall(work)
    xz_bundle = tmp_path / "root.tar.xz"
    with tarfile.open(xz_bundle, "w:xz") as t:
        t.add(work / "root", arcname="root")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "xz").write_text("#!/bin/sh\necho 'xz: broken' >&2\nexit 1\n")
    (fake / "xz").chmod(0o755)
    rc, log, out, num = window(tmp_path, xz_bundle, WINDOW_STAGES="facts",
                               PATH=f"{fake}:{os.environ['PATH']}")
    assert rc == 0, log[-3000:]
    assert status(num) == {"facts": "ok"} and num["facts"]["libs_ok"] == "yes"


def test_window_without_a_bundle_still_summarizes(tmp_path):
    rc, log, out, num = window(tmp_path, tmp_path / "missing.tar.gz")
    assert rc == 2, log[-2000:]
    assert "no bundle at" in log
    assert status(num) == {"unpack": "failed"}
    assert (out / "summary.txt").exists() and (out / "logs.tar.gz").exists()


def test_window_refuses_a_work_directory_it_did_not_make(tmp_path, bundle):
    keep = tmp_path / "work"
    keep.mkdir()
    (keep / "precious.txt").write_text("not the window's")
    rc, log, _, _ = window(tmp_path, bundle)
    assert rc == 2 and "was not made by a window" in log, log[-1000:]
    assert (keep / "precious.txt").read_text() == "not the window's"
