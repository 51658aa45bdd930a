"""The contract of the distributed engine: every dp x tp x pp layout trains exactly like one
process. For each value mode, a few steps on {dp,tp,pp} in {1,2}^3, pp=4, and tp=2,pp=2 with 4
micro-batches must give the single-process per-step losses (1e-5 relative) and parameters after
the last step (1e-4 relative, read from the checkpoint every layout writes with global shapes).
The interleaved schedule (--vpp) is held to the same contract: V1, x0, every earlier value and
DenseFormer's earlier outputs crossing virtual-stage boundaries (the last rank's chunk feeding
the first rank's next chunk), and a --vpp checkpoint resumed on another layout."""
import json
import os
import subprocess

import h5py
import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
MODES = ["baseline", "resformer-plus", "resformer-dense", "svformer", "x0v", "bov", "value-embed",
         "resformer-hidden"]
# Block shapes, NeuTRENO and DenseFormer (sas/sas-p need Hkv = H: --kv-heads 4). Per-head gains
# split with their heads over tp; identity projections take/place the rank's head columns;
# DenseFormer's earlier outputs and NeuTRENO's V1 cross pipeline stages.
VARIANTS = {
    "sas-p_espa_neutreno": ["--value", "neutreno", "--block", "sas-p", "--kv-heads", "4",
                            "--attn-bias", "espa"],
    "sas_nonorm_orth_x0v": ["--value", "x0v", "--block", "sas", "--kv-heads", "4", "--norm",
                            "none", "--reparam-init", "orth"],
    "vskipinit_dense": ["--block", "vskipinit", "--dense"],
    "parallel_dense_period": ["--value", "resformer-learnable", "--block", "parallel", "--dense",
                              "--dense-period", "2", "--dense-dilation", "2"],
    # The BoV paper's recipe: the smear gate (first stage, replicated over tp), windows of W + 1
    # keys, nanochat's scaled Muon decay (cosine) and momentum schedule. The decay is the
    # decoupled one here: nanochat's cautious mask (x p >= 0) is a step function of the update,
    # so rounding-level differences between layouts flip it at elements where x or p is near 0
    # and move them by the whole decay (seen: 3e-4 relative with tp 2); the mask itself is
    # checked by the optimizer's unit test and the op parity row.
    "bov_recipe": ["--value", "bov", "--recipe", "bov", "--muon-wd-style", "decoupled"],
}
# DenseFormer starts at a symmetry point: with W_O = W_proj = 0 (or a norm right after an
# average) the loss is invariant to the scale of each average, so some weights have exactly zero
# gradient at init and AdamW's normalized first step moves them by +-lr on rounding noise, which
# differs between layouts. These variants first train WARM steps on one process, and every
# layout resumes that checkpoint (a start off the symmetry point). (An average of a single
# output right before a norm, as vskipinit with --dense-dilation 2 makes after block 0, stays
# a pure scale of a norm's input, with zero gradient for good: not a layout test.)
WARM = {"vskipinit_dense": 2, "parallel_dense_period": 2}
# (dp, tp, pp, micro-batches per step)
LAYOUTS = [(dp, tp, pp, None) for dp in (1, 2) for tp in (1, 2) for pp in (1, 2)
           if (dp, tp, pp) != (1, 1, 1)] + [(1, 1, 4, None), (1, 2, 2, 4)]
STEPS = 5
SEQ = 32
MICRO = 2
MODEL = ["--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--seq-len", str(SEQ),
         "--window", "8"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    rng = np.random.default_rng(0)
    words = ["the", "lord", "said", "unto", "moses", "and", "in", "beginning", "god", "light"]
    text = " ".join(rng.choice(words, size=20000)) + "\n"
    (d / "corpus.txt").write_text(text)
    out = d / "data"
    r = subprocess.run([VTRAIN, "prepare", "--input", str(d / "corpus.txt"), "--out", str(out),
                        "--tokenizer", "bpe:300", "--val-fraction", "0.1", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def train(datadir, out, mode, dp, tp, pp, micro, resume=None, stop_at=None, vpp=1, layers=4):
    """`mode`: a value mode, or a list of extra flags (a VARIANTS entry). resume: a checkpoint to
    continue from; stop_at: save at that step and stop (exit 75); returns nothing then. vpp: model
    chunks per pipeline rank (interleaved 1F1B); layers: the model's depth."""
    micro = micro or 4 // dp  # 4 micro-batches at dp=1, 2 at dp=2: same global batch
    global_batch = micro * MICRO * SEQ * dp
    assert global_batch == 4 * MICRO * SEQ or dp == 1
    extra = ["--value", mode] if isinstance(mode, str) else list(mode)
    model = list(MODEL)
    model[model.index("--layers") + 1] = str(layers)
    if "--kv-heads" in extra:  # the variant's own head layout replaces the default one
        k = model.index("--kv-heads")
        del model[k:k + 2]
    cmd = [VTRAIN, "train", "--data", str(datadir), *model, *extra,
           "--micro-batch", str(MICRO), "--global-batch", str(global_batch), "--steps", str(STEPS),
           "--tp", str(tp), "--pp", str(pp), "--eval-tokens", "2048", "--seed", "5",
           "--metrics", str(out / "m.jsonl"), "--ckpt-dir", str(out / "ckpt")]
    if vpp > 1:
        cmd += ["--vpp", str(vpp)]
    if resume:
        cmd += ["--resume", str(resume)]
    if stop_at:
        cmd += ["--stop-at-step", str(stop_at)]
    n = dp * tp * pp
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(n)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == (75 if stop_at else 0), f"{' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    if stop_at:
        return None
    losses = [json.loads(l)["loss"] for l in open(out / "m.jsonl") if '"loss"' in l]
    with h5py.File(out / "ckpt" / f"step_{STEPS:08d}.h5", "r") as f:
        params = {k: f["model"][k][()] for k in f["model"]} if "model" in f else {}
        if not params:
            def walk(name, obj):
                if isinstance(obj, h5py.Dataset) and name.startswith("model/"):
                    params[name[len("model/"):]] = obj[()]
            f.visititems(walk)
    return np.array(losses), params


@pytest.mark.parametrize("mode", MODES + list(VARIANTS))
def test_layouts_match_one_process(mode, datadir, tmp_path):
    warm = None
    if mode in WARM:
        train(datadir, tmp_path / "warm", VARIANTS[mode], 1, 1, 1, 4, stop_at=WARM[mode])
        warm = tmp_path / "warm" / "ckpt" / f"step_{WARM[mode]:08d}.h5"
    steps = STEPS - (WARM[mode] if warm else 0)
    mode = VARIANTS.get(mode, mode)
    ref_losses, ref_params = train(datadir, tmp_path / "ref", mode, 1, 1, 1, 4, resume=warm)
    assert len(ref_losses) == steps and ref_losses[-1] < ref_losses[0]
    assert len(ref_params) >= 4 * 5 + 2, sorted(ref_params)  # wq wk wo fc proj per layer, wte, lm_head
    failures = []
    for dp, tp, pp, micro in LAYOUTS:
        tag = f"dp{dp}_tp{tp}_pp{pp}" + (f"_m{micro}" if micro else "")
        losses, params = train(datadir, tmp_path / tag, mode, dp, tp, pp, micro, resume=warm)
        rel = np.max(np.abs(losses - ref_losses) / np.abs(ref_losses))
        if not rel <= 1e-5:
            failures.append(f"{tag}: losses {losses} vs {ref_losses} (rel {rel:.2e})")
        if set(params) != set(ref_params):
            failures.append(f"{tag}: parameter names differ: {sorted(set(params) ^ set(ref_params))}")
            continue
        for name, ref in ref_params.items():
            err = np.max(np.abs(params[name] - ref)) / max(np.max(np.abs(ref)), 1e-30)
            if not err <= 1e-4:
                failures.append(f"{tag}: {name} differs (rel {err:.2e})")
    assert not failures, "\n".join(failures)


# --zero 2 (gradients reduce-scattered into the optimizer's owners): the same contract on the
# layouts with data parallelism, dp 4 included, for value modes with pipeline-shared parameters
# (x0v, resformer-dense), value tables (bov) and the plain model. A run's comm_bytes (rank 0's
# bytes a step) must be below the ZeRO-1 run's on the same layout.
ZERO2_MODES = ["baseline", "x0v", "resformer-dense", "bov"]
ZERO2_LAYOUTS = [(2, 1, 1, None), (2, 2, 1, None), (2, 1, 2, None), (4, 1, 1, None)]


def comm_bytes(out):
    return [json.loads(l)["comm_bytes"] for l in open(out / "m.jsonl") if '"comm_bytes"' in l]


@pytest.mark.parametrize("mode", ZERO2_MODES)
def test_zero2_layouts_match_one_process(mode, datadir, tmp_path):
    ref_losses, ref_params = train(datadir, tmp_path / "ref", ["--value", mode, "--zero", "2"],
                                   1, 1, 1, 4)
    assert ref_losses[-1] < ref_losses[0]
    failures = []
    for dp, tp, pp, micro in ZERO2_LAYOUTS:
        tag = f"dp{dp}_tp{tp}_pp{pp}"
        losses, params = train(datadir, tmp_path / tag, ["--value", mode, "--zero", "2"], dp, tp,
                               pp, micro)
        rel = np.max(np.abs(losses - ref_losses) / np.abs(ref_losses))
        if not rel <= 1e-5:
            failures.append(f"{tag}: losses {losses} vs {ref_losses} (rel {rel:.2e})")
        for name, ref in ref_params.items():
            err = np.max(np.abs(params[name] - ref)) / max(np.max(np.abs(ref)), 1e-30)
            if not err <= 1e-4:
                failures.append(f"{tag}: {name} differs (rel {err:.2e})")
        if (dp, tp, pp) == (2, 1, 1):
            train(datadir, tmp_path / "zero1", ["--value", mode], dp, tp, pp, micro)
            z1, z2 = comm_bytes(tmp_path / "zero1"), comm_bytes(tmp_path / tag)
            if not (len(z1) == len(z2) == len(losses) and all(b < a for a, b in zip(z1, z2))):
                failures.append(f"comm_bytes: zero 1 {z1}, zero 2 {z2}")
    assert not failures, "\n".join(failures)


# --fp8 e4m3 on the layouts. The pipeline runs each micro-batch's FP8 GEMMs on the operands one
# process has, in the same order (per-tensor scales of the same tensors, the weights' codes
# quantized once a step either way): the layout contract as it stands (1e-5 losses, 1e-4
# parameters). Data parallelism sums the gradients in another order (rounding-level, as the bf16
# contract allows), and FP8 rounding is a step function: a weight that moved by a rounding
# error crosses an FP8 rounding boundary where it sat near one, and the next steps' GEMMs see a
# whole FP8 quantum of difference there. Tensor parallelism takes its scales per shard
# (docs/model.md "FP8 linear layers": a rank's weight shard and, for the row-parallel W_O and
# W_proj, its slice of the activations take their own amax, no all-reduce before each GEMM), so
# a shard whose amax falls a binade below the whole tensor's rounds on a finer grid. Both are
# held to the distance FP8 itself puts between one process's FP8 and bf16 runs (the size of
# FP8 rounding on this model), per parameter and for the losses.
FP8_LAYOUTS = [(2, 1, 1, None), (1, 1, 2, None), (2, 1, 2, None), (1, 2, 1, None),
               (1, 2, 2, 4)]


def test_fp8_layouts_match_one_process(datadir, tmp_path):
    fp8 = ["--value", "baseline", "--fp8", "e4m3"]
    ref_losses, ref_params = train(datadir, tmp_path / "ref", fp8, 1, 1, 1, 4)
    bf_losses, bf_params = train(datadir, tmp_path / "bf16", ["--value", "baseline"], 1, 1, 1, 4)
    assert ref_losses[-1] < ref_losses[0]
    fp8_loss_dist = np.max(np.abs(ref_losses - bf_losses) / np.abs(bf_losses))
    fp8_param_dist = {n: np.max(np.abs(ref_params[n] - bf_params[n])) /
                      max(np.max(np.abs(bf_params[n])), 1e-30) for n in ref_params}
    # FP8 moves the parameters by more than the layout contract allows (else this test could not
    # tell an FP8 layout from a bf16 one), and the metrics count its GEMMs.
    assert max(fp8_param_dist.values()) > 1e-4, fp8_param_dist
    assert all(json.loads(l)["fp8"]["forward"]["gemms"] > 0
               for l in open(tmp_path / "ref" / "m.jsonl") if '"loss"' in l)
    failures = []
    for dp, tp, pp, micro in FP8_LAYOUTS:
        tag = f"dp{dp}_tp{tp}_pp{pp}" + (f"_m{micro}" if micro else "")
        losses, params = train(datadir, tmp_path / tag, fp8, dp, tp, pp, micro)
        rel = np.max(np.abs(losses - ref_losses) / np.abs(ref_losses))
        exact = dp == 1 and tp == 1  # the pipeline alone
        loss_bound = 1e-5 if exact else max(1e-5, fp8_loss_dist)
        if not rel <= loss_bound:
            failures.append(f"{tag}: losses {losses} vs {ref_losses} (rel {rel:.2e}, bound "
                            f"{loss_bound:.2e})")
        for name, ref in ref_params.items():
            err = np.max(np.abs(params[name] - ref)) / max(np.max(np.abs(ref)), 1e-30)
            bound = 1e-4 if exact else max(1e-4, fp8_param_dist[name])
            if not err <= bound:
                failures.append(f"{tag}: {name} differs (rel {err:.2e}, bound {bound:.2e})")
    assert not failures, "\n".join(failures)


# Interleaved 1F1B: (flags, layers, dp, tp, pp, vpp, micro-batches per step and dp rank, a
# multiple of pp). With 4 layers over pp 2 x vpp 2 every layer is its own virtual stage: rank 0
# holds layers 0 and 2, rank 1 layers 1 and 3, so V1 (layer 0's value) goes 0 -> 1 -> 0 -> 1
# round the ring. m = pp (the dp 2 case) runs every forward before the backwards.
VPP_CASES = {
    "v1_pp2_vpp2": (["--value", "v1"], 4, 1, 1, 2, 2, 4),
    "resformer-dense_tp2_pp2_vpp2": (["--value", "resformer-dense"], 4, 1, 2, 2, 2, 4),
    "x0v_pp4_vpp2": (["--value", "x0v"], 8, 1, 1, 4, 2, 8),
    "vskipinit_dense_dp2_pp2_vpp2": (VARIANTS["vskipinit_dense"], 4, 2, 1, 2, 2, 2),
}


@pytest.mark.parametrize("case", list(VPP_CASES))
def test_interleaved_matches_one_process(case, datadir, tmp_path):
    flags, layers, dp, tp, pp, vpp, micro = VPP_CASES[case]
    warm = None
    if "--dense" in flags:  # off DenseFormer's symmetry point first (see WARM)
        train(datadir, tmp_path / "warm", flags, 1, 1, 1, micro * dp, stop_at=2, layers=layers)
        warm = tmp_path / "warm" / "ckpt" / f"step_{2:08d}.h5"
    ref_losses, ref_params = train(datadir, tmp_path / "ref", flags, 1, 1, 1, micro * dp,
                                   resume=warm, layers=layers)
    assert ref_losses[-1] < ref_losses[0]
    losses, params = train(datadir, tmp_path / "vpp", flags, dp, tp, pp, micro, resume=warm,
                           vpp=vpp, layers=layers)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert set(params) == set(ref_params)
    for name, ref in ref_params.items():
        err = np.max(np.abs(params[name] - ref)) / max(np.max(np.abs(ref)), 1e-30)
        assert err <= 1e-4, f"{case}: {name} differs (rel {err:.2e})"


def test_interleaved_checkpoint_resumes_on_another_layout(datadir, tmp_path):
    """A --vpp run saves at step 2; a plain pp = 2 run (other chunks: layers 0-1 / 2-3) resumes
    it and ends where one process does; `vtrain eval --pp 2 --vpp 2` gives one process's
    validation loss on it."""
    flags = ["--value", "resformer-identity"]
    ref_losses, ref_params = train(datadir, tmp_path / "ref", flags, 1, 1, 1, 4)
    train(datadir, tmp_path / "a", flags, 1, 1, 2, 4, stop_at=2, vpp=2)
    first = [json.loads(l)["loss"] for l in open(tmp_path / "a" / "m.jsonl") if '"loss"' in l]
    np.testing.assert_allclose(first, ref_losses[:2], rtol=1e-5)
    ck = tmp_path / "a" / "ckpt" / f"step_{2:08d}.h5"
    losses, params = train(datadir, tmp_path / "b", flags, 1, 1, 2, 4, resume=ck)
    np.testing.assert_allclose(losses, ref_losses[2:], rtol=1e-5)
    val = {}
    for pp, vpp in [(1, 1), (2, 2)]:
        cmd = [VTRAIN, "eval", "--ckpt", str(ck), "--data", str(datadir), "--tokens", "2048",
               "--micro-batch", "2", "--pp", str(pp), "--vpp", str(vpp)]
        if pp > 1:
            cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(pp)] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        line = [l for l in r.stdout.splitlines() if l.startswith("val loss")][0]
        val[vpp] = float(line.split()[2])
        if vpp > 1:
            assert "x vpp 2" in r.stdout, r.stdout
    assert abs(val[2] - val[1]) <= 1e-5 * abs(val[1]), val
    for name, ref in ref_params.items():
        err = np.max(np.abs(params[name] - ref)) / max(np.max(np.abs(ref)), 1e-30)
        assert err <= 1e-4, f"{name} differs (rel {err:.2e})"


def test_interleaved_refuses_nccl(datadir, tmp_path):
    """NCCL matches messages by order, the interleaved schedule by tag: an explicit
    --device-comm nccl with --vpp is refused by name (before any NCCL set-up)."""
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", VTRAIN, "train",
           "--data", str(datadir), *MODEL, "--micro-batch", str(MICRO), "--steps", "1",
           "--global-batch", str(4 * MICRO * SEQ), "--pp", "2", "--vpp", "2", "--device",
           "emulated", "--device-comm", "nccl"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode != 0
    assert "--vpp with NCCL" in r.stderr + r.stdout and "--device-comm mpi" in r.stderr + r.stdout, \
        r.stderr[-2000:]
