"""The device code path across ranks, on the device emulator (GPU-less CI runs it for real):
device tensors that host code cannot touch, pipeline bundles and TP/DP collectives staged
through host memory by the MPI communicator, the optimizer on the device, checkpoints copied out
of the device. With f32 activations the kernels are the CPU's, so every layout must give exactly
the per-step losses and checkpointed parameters of the same layout run with --device cpu; with
bf16 activations the losses stay within bf16 precision of f32 and still fall; a checkpoint
written by an emulated-device run resumes on the CPU and on the device identically."""
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
# (dp, tp, pp)
LAYOUTS = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (1, 2, 2)]


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("devlayouts")
    rng = np.random.default_rng(1)
    words = ["in", "the", "beginning", "was", "the", "word", "and", "light", "lord", "said"]
    (d / "corpus.txt").write_text(" ".join(rng.choice(words, size=20000)) + "\n")
    out = d / "data"
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "corpus.txt"), "--out", str(out),
                        "--tokenizer", "bpe:300", "--val-fraction", "0.1", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


# A simplified block with the U-SPA bias, NeuTRENO and DenseFormer (Hkv = H for sas-p).
# And the BoV paper's recipe (smear gate, windows of W + 1 keys, nanochat's Muon decay and
# momentum) under bov. And --fp8 e4m3.
VARIANTS = {"sas-p_uspa_neutreno_dense": ["--value", "neutreno", "--block", "sas-p", "--kv-heads",
                                          "4", "--attn-bias", "uspa", "--window-pattern", "L",
                                          "--dense"],
            "bov_recipe": ["--value", "bov", "--recipe", "bov"],
            # FP8 linear layers (issue 44): the device's quantization and scaled GEMMs are the
            # CPU's fake quantization bit for bit, so each layout equals its CPU run exactly.
            "baseline_fp8": ["--value", "baseline", "--fp8", "e4m3"]}


def train(datadir, out, mode, dp, tp, pp, device, steps=4, extra=()):
    global_batch = 4 * MICRO * SEQ
    flags = VARIANTS.get(mode, ["--value", mode])
    model = list(MODEL)
    if "--kv-heads" in flags:
        k = model.index("--kv-heads")
        del model[k:k + 2]
    cmd = [VTRAIN, "train", "--data", str(datadir), *model, *flags,
           "--micro-batch", str(MICRO), "--global-batch", str(global_batch), "--steps", str(steps),
           "--tp", str(tp), "--pp", str(pp), "--eval-tokens", "1024", "--seed", "3",
           "--metrics", str(out / "m.jsonl"), "--ckpt-dir", str(out / "ckpt"), "--device",
           device, *extra]
    n = dp * tp * pp
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(n)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    rows = [json.loads(l) for l in open(out / "m.jsonl") if '"loss"' in l]
    return np.array([x["loss"] for x in rows]), rows, r.stdout


def params_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        def walk(name, obj):
            if isinstance(obj, h5py.Dataset) and name.startswith("model/"):
                out[name[len("model/"):]] = obj[()]
        f.visititems(walk)
    return out


@pytest.mark.parametrize("mode", ["baseline", "bov", "resformer-dense", "value-embed",
                                  "sas-p_uspa_neutreno_dense", "bov_recipe", "baseline_fp8"])
def test_emulated_device_equals_cpu_on_every_layout(mode, datadir, tmp_path):
    failures = []
    for dp, tp, pp in LAYOUTS:
        tag = f"dp{dp}_tp{tp}_pp{pp}"
        cpu, _, _ = train(datadir, tmp_path / f"cpu_{tag}", mode, dp, tp, pp, "cpu")
        dev, rows, stdout = train(datadir, tmp_path / f"dev_{tag}", mode, dp, tp, pp, "emulated",
                                  extra=["--act-dtype", "f32"])
        assert "emulated device" in stdout and "memory estimate" in stdout, stdout
        assert rows[-1]["device_peak_bytes"] > 0
        if "--fp8" in VARIANTS.get(mode, []):  # the FP8 GEMMs ran on the device
            assert rows[-1]["fp8"]["forward"]["gemms"] > 0, rows[-1]
        if not np.array_equal(cpu, dev):
            failures.append(f"{tag}: losses cpu {cpu} emulated {dev}")
        pc = params_of(tmp_path / f"cpu_{tag}" / "ckpt" / "step_00000004.h5")
        pd = params_of(tmp_path / f"dev_{tag}" / "ckpt" / "step_00000004.h5")
        for k in pc:
            if not np.array_equal(pc[k], pd[k]):
                failures.append(f"{tag}: parameter {k} differs")
                break
    assert not failures, "\n".join(failures)


def test_bf16_layouts_fall_and_stay_near_f32(datadir, tmp_path):
    f32, _, _ = train(datadir, tmp_path / "f32", "bov", 1, 1, 1, "cpu", steps=8)
    for dp, tp, pp in [(1, 1, 1), (1, 2, 2), (2, 1, 1)]:
        tag = f"dp{dp}_tp{tp}_pp{pp}"
        bf, _, _ = train(datadir, tmp_path / tag, "bov", dp, tp, pp, "emulated", steps=8,
                         extra=["--act-dtype", "bf16"])
        # bf16 activations: ~2^-8 relative per stored value; the loss follows f32 within 2%.
        assert np.all(np.abs(bf - f32) <= 0.02 * f32), f"{tag}: bf16 {bf} vs f32 {f32}"
        assert bf[-1] < 0.8 * bf[0], f"{tag}: bf16 loss did not fall: {bf}"


def test_zero2_bf16_return_on_the_emulated_device(datadir, tmp_path):
    # --zero 2 with bf16 activations on the emulated device: the output head's weight returns in
    # bf16 into every replica's bf16 weight copy, the rest in fp32, and Muon's results are applied
    # when the next forward reaches their layer; the checkpoint's fp32 masters are made whole
    # first. At dp 2 that is --zero 1's run bit for bit: the bf16 reduce-scatter of 2 ranks gives
    # the all-reduce's bits, the returned bf16 values are the cast --zero 1 makes, the deferred
    # Muon applies the same floats, and nothing clips (no --max-grad-norm: the owned parts' norm,
    # summed in another order, is only reported). dp 2 follows dp 1's losses (only the fp32
    # gradient sum's order differs; the zero-initialized projections' few updates amplify it in
    # the parameters, for --zero 1 alike), and the step sends fewer bytes than --zero 1's.
    flags = ["--act-dtype", "bf16", "--grad-sync", "bf16"]
    one, _, _ = train(datadir, tmp_path / "one", "baseline", 1, 1, 1, "emulated", steps=6,
                      extra=flags + ["--zero", "2"])
    two, rows2, _ = train(datadir, tmp_path / "two", "baseline", 2, 1, 1, "emulated", steps=6,
                          extra=flags + ["--zero", "2"])
    z1, rows1, _ = train(datadir, tmp_path / "z1", "baseline", 2, 1, 1, "emulated", steps=6,
                         extra=flags)
    assert np.array_equal(two, z1), (two, z1)
    np.testing.assert_allclose(two, one, rtol=2e-3)
    assert two[-1] < 0.9 * two[0], two
    p2 = params_of(tmp_path / "two" / "ckpt" / "step_00000006.h5")
    pz = params_of(tmp_path / "z1" / "ckpt" / "step_00000006.h5")
    assert set(p2) == set(pz) and "lm_head" in p2
    for k in pz:
        assert np.array_equal(p2[k], pz[k]), f"{k} differs from --zero 1's"
    b1 = [r["comm_bytes"] for r in rows1]
    b2 = [r["comm_bytes"] for r in rows2]
    assert all(b < a for a, b in zip(b1, b2)), (b1, b2)


def test_device_checkpoint_resumes_on_cpu_and_device(datadir, tmp_path):
    full, _, _ = train(datadir, tmp_path / "full", "bov", 1, 2, 1, "emulated", steps=6,
                       extra=["--act-dtype", "f32"])
    # Stop at step 3 on the emulated device (exit 75 after saving), then resume elsewhere.
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", VTRAIN, "train",
           "--data", str(datadir), *MODEL, "--value", "bov", "--micro-batch", str(MICRO),
           "--global-batch", str(4 * MICRO * SEQ), "--steps", "6", "--tp", "2",
           "--eval-tokens", "1024", "--seed", "3", "--metrics", str(tmp_path / "s.jsonl"),
           "--ckpt-dir", str(tmp_path / "stop" / "ckpt"), "--device", "emulated", "--act-dtype",
           "f32", "--stop-at-step", "3"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 75, r.stdout[-2000:] + r.stderr[-2000:]
    for device, tp in [("cpu", 1), ("emulated", 2)]:
        out = tmp_path / f"resume_{device}"
        (out / "ckpt").mkdir(parents=True)
        ck = tmp_path / "stop" / "ckpt" / "step_00000003.h5"
        resumed, _, _ = train(datadir, out, "bov", 1, tp, 1, device, steps=6,
                              extra=["--act-dtype", "f32", "--resume", str(ck)])
        assert len(resumed) == 3
        np.testing.assert_allclose(resumed, full[3:], rtol=1e-5, err_msg=device)
