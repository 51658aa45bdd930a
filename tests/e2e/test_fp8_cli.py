"""`vtrain train --fp8` end to end on the CPU (docs/usage.md, docs/model.md "FP8 linear layers"):
e4m3 trains (fake quantization, labelled so: no speed claim), its metrics carry the per-kind FP8 counts with the GEMMs the
model runs, the losses differ from --fp8 off but stay close, and an unknown value is refused."""
import json
import os
import subprocess

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
TINY = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "64", "--window", "32",
        "--micro-batch", "4", "--steps", "3", "--eval-every", "0", "--seed", "5"]


def run(*args, ok=True):
    r = subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, errors="replace",
                       timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if ok:
        assert r.returncode == 0, f"vtrain {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    text = subprocess.run(["bible", "Gen1:1-Gen10:32"], capture_output=True, text=True).stdout
    assert len(text) > 20_000, "the bible-kjv package is needed (scripts/setup.sh installs it)"
    (d / "gen.txt").write_text(text)
    out = tmp_path_factory.mktemp("data") / "gen"
    run("prepare", "--input", d / "gen.txt", "--out", out, "--tokenizer", "bpe:512",
        "--val-fraction", "0.1")
    return out


def steps(path):
    return [r for r in map(json.loads, open(path)) if "loss" in r and "val_loss" not in r]


def test_fp8_trains_and_counts(datadir, tmp_path):
    r = run("train", "--data", datadir, *TINY, "--fp8", "e4m3", "--metrics", tmp_path / "fp8.jsonl")
    assert "fake quantization" in r.stdout and "say nothing about FP8 speed" in r.stdout
    run("train", "--data", datadir, *TINY, "--metrics", tmp_path / "bf16.jsonl")
    f8, bf = steps(tmp_path / "fp8.jsonl"), steps(tmp_path / "bf16.jsonl")
    assert len(f8) == 3 and "fp8" not in bf[0]
    for r in f8:
        c = r["fp8"]
        # 2 layers x 6 linear GEMMs each way (W_Q, W_K, W_V, W_O, fc, proj), one micro-batch.
        assert [c[k]["gemms"] for k in ("forward", "data_grad", "weight_grad")] == [12, 12, 12]
        for k in c.values():
            assert k["saturated"] == [0, 0]  # current power-of-two scales never saturate
    # After two updates the FP8 rounding shows: close to bf16, not equal. (Step 1 can be equal:
    # the output projections start at zero, so the blocks add nothing yet.)
    assert f8[-1]["loss"] != bf[-1]["loss"]
    assert abs(f8[-1]["loss"] - bf[-1]["loss"]) < 0.02 * bf[-1]["loss"]


def test_unknown_fp8_value_is_refused(datadir):
    r = run("train", "--data", datadir, *TINY, "--fp8", "e5m2", ok=False)
    assert r.returncode != 0 and "--fp8" in r.stderr + r.stdout


def with_flags(args, **values):
    """args with the values of the flags named (dim=72: --dim 72) replaced."""
    out = list(args)
    for k, v in values.items():
        out[out.index("--" + k.replace("_", "-")) + 1] = str(v)
    return out


def test_fp8_shape_no_gemm_can_take_is_refused_by_name(datadir):
    # --dim 72: the forward's inner dimension (the width) is not a multiple of 16, which an FP8
    # GEMM needs (cuBLASLt's rule): refused before training, naming the dimension.
    args = with_flags(TINY, dim=72)
    r = run("train", "--data", datadir, *args, "--fp8", "e4m3", ok=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "--dim (the width) is 72, not a multiple of 16" in out, out
    assert "--fp8 off" in out
    # The micro-batch's tokens are the weight gradient's inner dimension: 1 x 8 is refused.
    r = run("train", "--data", datadir, *with_flags(TINY, micro_batch=1, seq_len=8, window=8),
            "--fp8", "e4m3", ok=False)
    assert "the micro-batch's tokens (--micro-batch x --seq-len) is 8" in r.stdout + r.stderr
    run("train", "--data", datadir, *with_flags(args, steps=1))  # bf16 takes the shape


def losses(path):
    return [r["loss"] for r in steps(path)]


def test_resume_needs_no_fp8_state_and_may_switch_fp8(datadir, tmp_path):
    # Scales come from the current amax: nothing to save. An FP8 run stopped at step 2 and
    # resumed gives the uninterrupted run's losses bit for bit.
    four, two = with_flags(TINY, steps=4), with_flags(TINY, steps=2)
    run("train", "--data", datadir, *four, "--fp8", "e4m3", "--metrics", tmp_path / "whole.jsonl")
    ck = tmp_path / "ck"
    run("train", "--data", datadir, *two, "--fp8", "e4m3", "--ckpt-dir", ck)
    r = run("train", "--data", datadir, *four, "--fp8", "e4m3", "--ckpt-dir", ck, "--resume",
            "auto", "--metrics", tmp_path / "resumed.jsonl")
    assert "differ from the checkpoint" not in r.stdout
    assert losses(tmp_path / "resumed.jsonl") == losses(tmp_path / "whole.jsonl")[2:]
    # Switched on (and off) at a resume: allowed, with a note naming the change.
    for before, after in (("off", "e4m3"), ("e4m3", "off")):
        d = tmp_path / f"{before}_{after}"
        run("train", "--data", datadir, *two, "--fp8", before, "--ckpt-dir", d)
        r = run("train", "--data", datadir, *four, "--fp8", after, "--ckpt-dir", d, "--resume",
                "auto", "--metrics", tmp_path / f"{before}_{after}.jsonl")
        assert f'fp8 "{before}" -> "{after}"' in r.stdout, r.stdout
        got = steps(tmp_path / f"{before}_{after}.jsonl")
        assert len(got) == 2 and all(("fp8" in s) == (after == "e4m3") for s in got)


def test_plan_knows_fp8(tmp_path):
    base = ["plan", "--preset", "d24", "--tokens", "10e9", "--gpus", "8", "--gpu", "h200",
            "--layout", "1,1,8", "--micro-batch", "16", "--json"]
    off = json.loads(run(*base).stdout.strip().splitlines()[-1])
    on = json.loads(run(*base, "--fp8", "e4m3").stdout.strip().splitlines()[-1])
    # Faster compute (the FP8 GEMMs) with the quantization passes counted, and more memory (the
    # weights' FP8 codes).
    assert on["fp8_quant_s"] > 0 and off["fp8_quant_s"] == 0
    assert on["compute_s"] < off["compute_s"]
    assert on["fp8_weights_bytes"] > 0 and off["fp8_weights_bytes"] == 0
    assert on["per_gpu_bytes"] - off["per_gpu_bytes"] >= on["fp8_weights_bytes"]
    r = run("plan", "--preset", "d24", "--tokens", "10e9", "--gpus", "8", "--gpu", "a100-80",
            "--fp8", "e4m3", ok=False)
    assert r.returncode != 0 and "--fp8 e4m3 with --gpu a100-80: this GPU has no FP8 tensor cores" \
        in r.stdout + r.stderr
