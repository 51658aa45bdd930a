"""`vtrain plan` end to end: --help, a real plan printing its table sorted by days, refusals
naming the input, and the planner's memory per GPU against reality: for a small model the
estimate `vtrain plan --layout 1,1,1 --json` gives must be within 10% of the device_peak_bytes
that `vtrain train --device emulated` reports after one step of the same model and batch."""
import json
import os
import re
import subprocess

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def vt(*args, timeout=300):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True,
                          errors="replace", env=ENV, timeout=timeout)


def test_help_lists_the_flags():
    r = vt("plan", "--help")
    assert r.returncode == 0, r.stderr
    for flag in ["--preset", "--layers", "--value", "--tokens", "--global-batch", "--gpus",
                 "--gpu", "--gpus-per-node", "--mfu", "--intra-node-gbps", "--inter-node-gbps",
                 "--disk-gbps", "--max-layouts", "--layout"]:
        assert flag in r.stdout, flag
    assert "plan" in vt("--help").stdout


def test_a_plan_prints_layouts_sorted_by_days():
    r = vt("plan", "--preset", "d12", "--tokens", "10e9", "--gpus", "16", "--gpu", "a100-80",
           "--max-layouts", "5")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "recompute" in out and "GPU-hours" in out and "not a measurement" in out
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+o", l)]
    assert 1 <= len(rows) <= 5, out
    for tp, pp, dp, *_ in rows:
        assert int(tp) * int(pp) * int(dp) == 16
    # tp pp dp mb m recompute GiB bubble gemm launch-s tp-s pp-s dp-s step tok/s days GPU-hours
    assert all(len(x) == 17 for x in rows), rows
    days = [float(x[15]) for x in rows]
    assert days == sorted(days), days
    assert "checkpoint:" in out and "memory per GPU of tp" in out
    # The JSON lines carry the same layouts, fitting and best first.
    j = [json.loads(l) for l in vt("plan", "--preset", "d12", "--tokens", "10e9", "--gpus", "16",
                                   "--gpu", "a100-80", "--json").stdout.splitlines()]
    assert j and all(x["fits"] for x in j)
    assert [x["days"] for x in j] == sorted(x["days"] for x in j)


def test_vpp_interleaves_the_layouts_that_allow_it():
    """--vpp 2 on d12 (12 layers): pp 2 (6 layers per stage, 3 each chunk) interleaves, with the
    bubble 1 + (pp-1)/(2 m); pp 4 with 3 layers per stage cannot and stays plain."""
    base = ["plan", "--preset", "d12", "--tokens", "10e9", "--gpus", "8", "--gpu", "h100", "--json"]
    plain = {(x["tp"], x["pp"], x["dp"], x["micro_batch"], x["recompute"]): x
             for x in map(json.loads, vt(*base).stdout.splitlines())}
    inter = [json.loads(l) for l in vt(*base, "--vpp", "2").stdout.splitlines()]
    assert inter
    seen = set()
    for x in inter:
        p = plain[(x["tp"], x["pp"], x["dp"], x["micro_batch"], x["recompute"])]
        m = x["micro_batches"]
        if x["pp"] == 2 and m % 2 == 0:
            assert x["vpp"] == 2 and x["bubble"] == pytest.approx(1 + 1 / (2 * m))
            assert p["bubble"] == pytest.approx(1 + 1 / m)
            seen.add(2)
        elif x["pp"] == 4:
            assert x["vpp"] == 1 and x["bubble"] == pytest.approx(p["bubble"])
            seen.add(4)
    assert 2 in seen, "no interleaved layout in the plan"
    r = vt("plan", "--preset", "d12", "--tokens", "1e9", "--layout", "1,2,4", "--micro-batch", "4",
           "--vpp", "2")
    assert r.returncode == 0 and "interleaved 1F1B: --vpp 2" in r.stdout, r.stdout[-1500:]


@pytest.mark.parametrize("args,message", [
    (["--preset", "d32", "--tokens", "200e9", "--gpus", "1", "--gpu", "custom",
      "--gpu-memory-gib", "16", "--gpu-tflops", "100"],
     r"no layout of 1 custom GPUs fits: the smallest need is [\d.]+ GiB per GPU .*--gpus \d+ would fit"),
    (["--preset", "d32", "--tokens", "200e9", "--gpus", "12"],
     r"--gpus 12 is not a whole number of nodes of --gpus-per-node 8"),
    (["--preset", "d12", "--tokens", "1e9", "--global-batch", "1000"],
     r"--global-batch 1000 tokens is not a whole number of rows of --seq-len 2048"),
    (["--preset", "d12"], r"--tokens"),
    (["--preset", "d12", "--tokens", "1e9", "--gpu", "custom"], r"--gpu custom needs --gpu-memory-gib"),
    (["--preset", "d12", "--tokens", "1e9", "--layout", "2,2"], r"--layout '2,2' is not TP,PP,DP"),
    (["--preset", "d12", "--memory-only"], r"--memory-only applies only with --layout"),
    (["--preset", "d12", "--layout", "1,1,1"], r"--tokens is required"),
    (["--preset", "d12", "--layout", "1,5,1", "--memory-only"], r"pp 5 must divide --layers 12"),
    (["--preset", "d12", "--tokens", "1e9", "--value", "v1", "--table-offload"],
     r"--table-offload .* --value-mode v1 has none"),
])
def test_refusals_name_the_input(args, message):
    r = vt("plan", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert re.search(message, r.stderr), r.stderr
    assert "vtrain plan: error:" in r.stderr


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    text = subprocess.run(["bible", "Gen1:1-Gen20:18"], capture_output=True, text=True).stdout
    assert len(text) > 50_000, "the bible-kjv package is needed (scripts/setup.sh installs it)"
    (d / "g.txt").write_text(text)
    r = vt("prepare", "--input", d / "g.txt", "--out", d / "data", "--tokenizer", "bpe:512",
           "--val-fraction", "0.1", "--quiet")
    assert r.returncode == 0, r.stderr
    return d / "data"


@pytest.mark.parametrize("value", ["baseline", "bov", "bov --table-offload"])
def test_memory_estimate_matches_the_emulated_device_peak(datadir, tmp_path, value):
    tok = json.load(open(datadir / "tokenizer.json"))
    vocab = len(tok["tokens"]) + len(tok["specials"])
    model = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "128", "--window", "64",
             "--value", *value.split()]
    mb = 16
    batch = ["--global-batch", str(mb * 128)]
    r = vt("train", "--data", datadir, *model, "--micro-batch", mb, *batch, "--steps", "1",
           "--device", "emulated", "--final-eval-tokens", "0", "--metrics", tmp_path / "m.jsonl")
    assert r.returncode == 0, r.stderr
    peak = json.loads(open(tmp_path / "m.jsonl").readlines()[-1])["device_peak_bytes"]
    started = re.search(r"memory estimate \(rank 0\): (.+)", r.stdout)
    assert started, r.stdout[-1500:]
    # --memory-only (what tools/memory_plan printed): the very line train printed at start-up.
    r = vt("plan", *model, "--vocab", vocab, "--layout", "1,1,1", "--micro-batch", mb,
           "--memory-only")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"tp 1 pp 1 dp 1 micro-batch {mb} stage 0 (layers 0..1): {started.group(1)}"], r.stdout
    r = vt("plan", *model, "--vocab", vocab, "--tokens", "1e6", *batch, "--gpus", "1",
           "--layout", "1,1,1", "--micro-batch", mb, "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    # The planner's per-GPU figure less its stated allowance (context, workspaces, communication
    # buffers, which the emulated device does not allocate) is the engine's estimate.
    assert plan["per_gpu_bytes"] == pytest.approx(plan["estimate_bytes"] + plan["allowance_bytes"])
    assert plan["estimate_bytes"] == pytest.approx(peak, rel=0.10), (plan, peak)


def test_memory_only_gives_every_stage():
    """--layout --memory-only needs no --tokens and prints one estimate per pipeline stage: the
    loss end's logits only on the last; the JSON lines carry the same totals and the full
    --layout report the same stage lines."""
    args = ["plan", "--preset", "d12", "--seq-len", "2048", "--layout", "2,2,2", "--micro-batch", "4",
            "--memory-only"]
    r = vt(*args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [l.split(": ")[0] for l in lines] == [
        "tp 2 pp 2 dp 2 micro-batch 4 stage 0 (layers 0..5)",
        "tp 2 pp 2 dp 2 micro-batch 4 stage 1 (layers 6..11)"], r.stdout
    j = [json.loads(l) for l in vt(*args, "--json").stdout.splitlines()]
    assert [x["stage"] for x in j] == [0, 1]
    assert j[0]["logits_bytes"] == 0 and j[1]["logits_bytes"] > 0
    for x, line in zip(j, lines):
        assert re.search(r"total ([\d.]+) GiB", line).group(1) == f"{x['estimate_bytes'] / 2**30:.2f}"
    # The same layout's full report shows the same stages.
    full = vt("plan", "--preset", "d12", "--seq-len", "2048", "--layout", "2,2,2", "--micro-batch",
              "4", "--tokens", "1e9")
    assert full.returncode == 0, full.stderr
    for line in lines:
        assert line.split(": ", 1)[1] in full.stdout, (line, full.stdout[-2000:])


# --calibrate: the MFU a real run measured replaces the assumed one, from a metrics JSONL (the
# median of the steps after the first quarter) or the GPU window's plan_calibration.json.
PLAN = ["plan", "--preset", "d24", "--tokens", "20e9", "--gpus", "8", "--gpu", "h100",
        "--max-layouts", "1"]


def test_calibrate_from_a_metrics_file(tmp_path):
    m = tmp_path / "m.jsonl"
    rows = [{"step": 1, "loss": 9, "mfu": 0.05}] + [{"step": s, "loss": 5, "mfu": x}
                                                     for s, x in [(2, 0.41), (3, 0.43), (4, 0.42)]]
    m.write_text("\n".join(json.dumps(r) for r in rows + [{"step": 4, "val_loss": 3.0}]) + "\n")
    r = vt(*PLAN, "--calibrate", m)
    assert r.returncode == 0, r.stderr
    assert f"assumed: MFU 0.42, measured ({m}: median of 3 steps)" in r.stdout, r.stdout
    # The measured MFU drives the estimate: the same plan at --mfu 0.42 gives the same days.
    same = vt(*PLAN, "--mfu", "0.42")
    days = lambda out: [l.split()[-3] for l in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+", l)]
    assert days(r.stdout) == days(same.stdout) and days(r.stdout)


def test_calibrate_from_the_gpu_window(tmp_path):
    c = tmp_path / "plan_calibration.json"
    c.write_text(json.dumps({"schema": 1, "device": "NVIDIA H100 80GB HBM3",
                             "presets": {"d24": {"mfu": 0.37, "tok_per_s": 1.0}}}))
    r = vt(*PLAN, "--calibrate", c)
    assert r.returncode == 0, r.stderr
    assert "MFU 0.37, measured on NVIDIA H100 80GB HBM3" in r.stdout, r.stdout


@pytest.mark.parametrize("content,extra,message", [
    ('{"step": 1, "loss": 3}\n', [], "no step with an \"mfu\""),
    ('{"presets": {"d32": {"mfu": 0.4}}}', [], "no \"mfu\" for preset d24"),
    ('{"EMULATED (not a GPU number)": 1, "presets": {"d24": {"mfu": 0.4}}}', [], "CUDA emulation"),
    ('{"step": 1, "mfu": 1.5}\n', [], "MFU 1.5 is outside [0.001, 1]"),
    ('not json\n', [], ":1: not a JSON object"),
    ('{"step": 1, "mfu": 0.4}\n', ["--mfu", "0.3"], "give one of them"),
], ids=["no-mfu", "other-preset", "emulated", "mfu-above-1", "not-json", "with-mfu"])
def test_calibrate_refusals(tmp_path, content, extra, message):
    c = tmp_path / "cal"
    c.write_text(content)
    r = vt(*PLAN, "--calibrate", c, *extra)
    assert r.returncode == 2 and message in r.stderr, r.stderr
