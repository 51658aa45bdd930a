"""The block shapes, NeuTRENO and DenseFormer through the vtrain CLI: bad combinations are
refused before any work with a message naming the option (exit 2, nothing written to the
checkpoint directory), and a simplified block with NeuTRENO and DenseFormer trains, checkpoints,
resumes on another layout (pp 2, tp 2), evaluates and generates with its KV cache."""
import json
import os
import re
import subprocess

import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
TINY = ["--layers", "4", "--dim", "64", "--heads", "4", "--seq-len", "32", "--window", "16"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")


def run(args, ok=True, ranks=1):
    cmd = [VTRAIN, *map(str, args)]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=ENV, timeout=600)
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def datadir(tmp_path_factory):
    d = tmp_path_factory.mktemp("blocks")
    rng = np.random.default_rng(1)
    words = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "was"]
    (d / "c.txt").write_text(" ".join(rng.choice(words, size=30000)) + "\n")
    run(["prepare", "--input", d / "c.txt", "--out", d / "data", "--tokenizer", "bpe:300",
         "--val-fraction", "0.1", "--quiet"])
    return d / "data"


REFUSALS = [
    (["--block", "sas", "--kv-heads", "2"], r"--block sas .*KV heads.*--kv-heads 2"),
    (["--block", "sas-p", "--kv-heads", "1"], r"--block sas-p .*KV heads"),
    (["--block", "prenorm", "--norm", "none"], r"--norm none: block shape 'prenorm' needs its pre-norms"),
    (["--block", "parallel", "--norm", "none"], r"--norm none: block shape 'parallel'"),
    (["--norm", "layer"], r"--norm layer: expected one of rms, none"),
    (["--block", "vskipinit", "--attn-bias", "espa"], r"--attn-bias espa .*W_Q starting at 0"),
    (["--attn-bias", "espa"], r"--attn-bias espa .*sas and sas-p.*'prenorm' does not take it"),
    (["--block", "sas", "--attn-bias", "gauss"], r"--attn-bias gauss: expected one of espa, uspa"),
    (["--block", "parallel", "--reparam-init", "id"], r"--reparam-init applies to .*sas"),
    (["--block", "vskipinit", "--proj-gains", "on"], r"--proj-gains on applies to .*sas.*'vskipinit'"),
    (["--block", "sas", "--proj-gains", "on", "--reparam-init", "id"],
     r"--proj-gains on and --reparam-init id"),
    (["--block", "sas", "--proj-gains", "yes"], r"--proj-gains yes: expected one of on, off"),
    (["--block", "sas", "--reparam-init", "xavier"], r"--reparam-init xavier: expected one of id, orth"),
    (["--block", "sas", "--qk-norm", "maybe"], r"--qk-norm maybe: expected one of on, off"),
    (["--block", "bert"], r"--block bert: expected one of prenorm, parallel, vskipinit, sas, sas-p"),
    (["--dense", "--dense-period", "3"], r"--dense-period 3 must divide the depth --layers 4"),
    (["--dense-period", "2"], r"--dense-dilation and --dense-period need --dense"),
    (["--dense", "--dense-dilation", "0"], r"--dense-dilation 0: out of range"),
    (["--value", "bov", "--neutreno-lambda", "0.5"], r"--neutreno-lambda applies only to --value neutreno"),
    (["--value", "neutreno", "--neutreno-lambda", "-1"], r"--neutreno-lambda -1: out of range"),
    (["--value", "neutreno", "--value-layers", "0,2"], r"layer 0 cannot be a target of value mode 'neutreno'"),
    (["--value", "bov", "--value-coef", "1"], r"--value-coef applies only to --value v1 or --value x0v"),
    (["--value", "v1", "--value-coef", "one"], r"--value-coef must be 'learnable' or a number"),
    (["--value", "x0v", "--plus-init", "paper"], r"--plus-init applies only to --value resformer-plus"),
    (["--value", "resformer-plus", "--plus-scale", "free"], r"--plus-scale free: expected one of learnable, fixed"),
    # U-SPA needs full context; the SimplEsT-ViT schedule is E-SPA's.
    (["--block", "sas", "--kv-heads", "4", "--attn-bias", "uspa"],
     r"--attn-bias uspa with sliding windows.*--window-pattern L"),
    (["--block", "sas", "--kv-heads", "4", "--attn-bias", "uspa", "--window-pattern", "L",
      "--spa-schedule", "simplest"], r"--spa-schedule simplest .*applies only to --attn-bias espa"),
    (["--block", "sas", "--kv-heads", "4", "--spa-schedule", "simplest"],
     r"--spa-schedule simplest .*no --attn-bias"),
    # --optimizer, --mlp-act, --warmup-frac and the official recipe.
    (["--optimizer", "sgd"], r"--optimizer sgd: expected one of muon, adamw"),
    (["--mlp-act", "gelu"], r"--mlp-act gelu: expected one of relu2, relu"),
    (["--optimizer", "adamw", "--matrix-lr", "0.01"], r"--matrix-lr applies to --optimizer muon"),
    (["--optimizer", "adamw", "--polar-express"], r"--polar-express applies to --optimizer muon"),
    (["--adamw-lr", "0.01"], r"--adamw-lr applies to --optimizer adamw"),
    (["--weight-decay", "0.1"], r"--weight-decay applies to --optimizer adamw"),
    (["--recipe", "official", "--warmup", "5"], r"--warmup and --warmup-frac both set the warmup"),
    (["--recipe", "official", "--gain-lr", "0.1"], r"--gain-lr applies to --optimizer muon"),
    (["--recipe", "official", "--muon-wd", "0.1"], r"--muon-wd applies to --optimizer muon"),
    (["--optimizer", "adamw", "--muon-momentum", "nanochat"],
     r"--muon-momentum applies to --optimizer muon"),
]


@pytest.mark.parametrize("extra,pattern", REFUSALS, ids=[" ".join(e) for e, _ in REFUSALS])
def test_refused_before_any_work(datadir, tmp_path, extra, pattern):
    ckpt = tmp_path / "ckpt"
    r = run(["train", "--data", datadir, *TINY, *extra, "--steps", "2", "--ckpt-dir", ckpt],
            ok=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert re.search(pattern, r.stderr), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert not ckpt.exists(), "a refused run wrote to its checkpoint directory"


def test_simplified_block_trains_resumes_on_another_layout_and_decodes(datadir, tmp_path):
    model = [*TINY, "--block", "sas-p", "--value", "neutreno", "--dense", "--dense-period", "2",
             "--attn-bias", "uspa", "--window-pattern", "L", "--micro-batch", "2", "--global-batch", "256", "--seed", "4"]
    ckpt = tmp_path / "ckpt"
    r = run(["train", "--data", datadir, *model, "--steps", "12", "--stop-at-step", "6",
             "--ckpt-dir", ckpt, "--metrics", tmp_path / "a.jsonl", "--eval-tokens", "1024"],
            ok=False)
    assert r.returncode == 75, r.stderr  # saved at step 6 and stopped
    assert "block sas-p + uspa" in r.stdout and "neutreno + DenseFormer" in r.stdout, r.stdout
    # Resume on 4 ranks as tp 2 x pp 2 and finish.
    run(["train", "--data", datadir, *model, "--steps", "12", "--resume", "auto", "--ckpt-dir",
         ckpt, "--metrics", tmp_path / "b.jsonl", "--eval-tokens", "1024", "--tp", "2", "--pp",
         "2"], ranks=4)
    # The same 12 steps on one process without stopping: the resumed run's losses agree.
    run(["train", "--data", datadir, *model, "--steps", "12", "--ckpt-dir", tmp_path / "one",
         "--metrics", tmp_path / "c.jsonl", "--eval-tokens", "1024"])
    def losses(p):
        return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
    resumed = losses(tmp_path / "a.jsonl")[:6] + losses(tmp_path / "b.jsonl")
    whole = losses(tmp_path / "c.jsonl")
    assert len(resumed) == len(whole) == 12
    np.testing.assert_allclose(resumed, whole, rtol=1e-5)
    assert whole[-1] < whole[0]
    latest = ckpt / (ckpt / "latest").read_text().strip()
    r = run(["eval", "--ckpt", latest, "--data", datadir])
    assert re.search(r"val bpb", r.stdout + r.stderr)
    g = run(["generate", "--ckpt", latest, "--prompt", "in the", "--max-tokens", "8", "--seed", "1"])
    assert g.stdout.startswith("in the")
    # Shaped attention keeps running sums, not a second cache: a standard K+V cache.
    m = re.search(r"kv-cache: (\d+) bytes/token \(a standard K\+V cache: (\d+)", g.stderr)
    assert m and m.group(1) == m.group(2), g.stderr


def test_official_recipe_trains_with_adamw_and_checkpoints(datadir, tmp_path):
    """--recipe official: one AdamW for every parameter, a ReLU MLP, 5% warmup then a linear
    decay to 0; the checkpoint holds AdamW states for the matrices, verifies and resumes."""
    model = [*TINY, "--block", "sas", "--micro-batch", "2", "--seed", "3"]
    ckpt = tmp_path / "ckpt"
    r = run(["train", "--data", datadir, *model, "--recipe", "official", "--steps", "20",
             "--stop-at-step", "10", "--ckpt-dir", ckpt, "--metrics", tmp_path / "a.jsonl",
             "--eval-tokens", "1024"], ok=False)
    assert r.returncode == 75, r.stderr
    assert "--optimizer adamw" in r.stdout and "--mlp-act relu" in r.stdout, r.stdout
    rows = [row for row in map(json.loads, open(tmp_path / "a.jsonl")) if "lr" in row]
    lrs = [row["lr"] for row in rows]
    # warmup ceil(0.05 * 20) = 1 step: the peak 1e-3 at step 0, then a linear decay to 0 over 19.
    np.testing.assert_allclose(lrs[0], 1e-3, rtol=1e-6)
    np.testing.assert_allclose(lrs[5], 1e-3 * 15 / 19, rtol=1e-6)  # (N - s) / D = 15 / 19
    assert rows[-1]["loss"] < rows[0]["loss"]
    latest = ckpt / (ckpt / "latest").read_text().strip()
    v = run(["ckpt", "verify", latest])
    assert "ok" in (v.stdout + v.stderr).lower(), v.stdout + v.stderr
    insp = run(["ckpt", "inspect", latest]).stdout
    assert "/optim/blocks.0.mlp.fc/exp_avg" in insp and "momentum_buffer" not in insp, insp
    # Resume on 2 ranks as tp 2 (AdamW on TP-split matrices) and finish; the losses agree with
    # one process's uninterrupted run.
    run(["train", "--data", datadir, *model, "--recipe", "official", "--steps", "20",
         "--resume", "auto", "--ckpt-dir", ckpt, "--eval-tokens", "1024", "--tp", "2",
         "--metrics", tmp_path / "b.jsonl"], ranks=2)
    run(["train", "--data", datadir, *model, "--recipe", "official", "--steps", "20",
         "--eval-tokens", "1024", "--metrics", tmp_path / "c.jsonl"])
    def losses(p):
        return [row["loss"] for row in map(json.loads, open(p)) if "lr" in row]
    resumed = losses(tmp_path / "a.jsonl")[:10] + losses(tmp_path / "b.jsonl")
    whole = losses(tmp_path / "c.jsonl")
    assert len(resumed) == len(whole) == 20
    np.testing.assert_allclose(resumed, whole, rtol=1e-5)
    # Resuming it under Muon is refused (its matrices have no Muon state).
    r = run(["train", "--data", datadir, *model, "--mlp-act", "relu", "--steps", "30",
             "--resume", "auto", "--ckpt-dir", ckpt, "--eval-tokens", "1024"], ok=False)
    assert r.returncode != 0 and "momentum_buffer" in r.stderr, r.stderr
