"""Run config files (issue 40, item 4; docs/usage.md "Config files"): `vtrain train --config
run.toml` reads the file through the flag table (the command line wins), refuses an unknown key,
a wrong type or a value out of range naming the file and the key, and `vtrain ckpt inspect
--as-config` writes a checkpoint's run as such a file, which trains the same run again: the same
saved options, model and losses."""
import json
import os
import subprocess

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "2", "--final-eval-tokens", "0"]


def vt(*args):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, env=ENV,
                          timeout=300)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("configdata")
    text = subprocess.run(["bible", "Gen1:1-Gen12:20"], capture_output=True, text=True).stdout
    (root / "g.txt").write_text(text)
    r = vt("prepare", "--input", root / "g.txt", "--out", root / "d", "--tokenizer", "bpe:300",
           "--quiet")
    assert r.returncode == 0, r.stderr
    return root / "d"


def losses(metrics):
    return [json.loads(l)["loss"] for l in open(metrics) if '"loss"' in l]


def body(toml_text):
    return [l for l in toml_text.splitlines() if not l.startswith("#")]


def test_config_file_sets_flags_and_the_command_line_wins(data, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'data = "{data}"\n'
                   '[model]\nlayers = 2\ndim = 32\nheads = 2\nseq-len = 32\nwindow = 16\n'
                   '[batch]\nmicro-batch = 2\n'
                   '[schedule]\nsteps = 4\nlr-scale = 0.5\n'
                   '[evaluation]\nfinal-eval-tokens = 0\n'
                   '[output]\nseed = 5\n')
    r = vt("train", "--config", cfg, "--steps", "2", "--ckpt-dir", tmp_path / "ck")
    assert r.returncode == 0, r.stderr[-2000:]
    ck = tmp_path / "ck" / "step_00000002.h5"  # --steps 2 from the command line, not 4
    assert ck.is_file(), sorted(p.name for p in (tmp_path / "ck").iterdir())
    r = vt("ckpt", "inspect", "--as-config", ck)
    assert r.returncode == 0, r.stderr
    lines = body(r.stdout)
    assert "steps = 2" in lines and "lr-scale = 0.5" in lines and "seed = 5" in lines, r.stdout
    assert "layers = 2" in lines and "dim = 32" in lines, r.stdout


@pytest.mark.parametrize("options", [
    ["--value", "bov", "--grad-sync", "bf16", "--muon-wd", "0.1", "--muon-wd-style", "nanochat",
     "--coef-optim", "vtrain", "--lr-scale", "0.7", "--warmup", "1", "--seed", "11",
     "--on-nonfinite", "skip-step", "--recompute", "mlp"],
    ["--optimizer", "adamw", "--adamw-lr", "0.003", "--weight-decay", "0.05", "--block", "sas",
     "--warmup-frac", "0.5", "--global-batch", "128"],
], ids=["muon", "adamw"])
def test_as_config_trains_the_same_run_again(data, tmp_path, options):
    a = vt("train", "--data", data, *MODEL, "--steps", "3", "--ckpt-dir", tmp_path / "a",
           "--metrics", tmp_path / "a.jsonl", *options)
    assert a.returncode == 0, a.stderr[-2000:]
    ra = vt("ckpt", "inspect", "--as-config", tmp_path / "a" / "step_00000003.h5")
    assert ra.returncode == 0, ra.stderr
    (tmp_path / "a.toml").write_text(ra.stdout)
    b = vt("train", "--config", tmp_path / "a.toml", "--ckpt-dir", tmp_path / "b",
           "--metrics", tmp_path / "b.jsonl")
    assert b.returncode == 0, ra.stdout + b.stderr[-2000:]
    rb = vt("ckpt", "inspect", "--as-config", tmp_path / "b" / "step_00000003.h5")
    assert rb.returncode == 0, rb.stderr
    assert body(rb.stdout) == body(ra.stdout)
    # The same model config and the same losses, step by step.
    ia = vt("ckpt", "inspect", tmp_path / "a" / "step_00000003.h5").stdout
    ib = vt("ckpt", "inspect", tmp_path / "b" / "step_00000003.h5").stdout
    config = lambda s: [l for l in s.splitlines() if l.startswith("  config ")]
    assert config(ia) == config(ib) and config(ia)
    la, lb = losses(tmp_path / "a.jsonl"), losses(tmp_path / "b.jsonl")
    assert len(la) == 3 and la == lb


@pytest.mark.parametrize("text,expected", [
    ("[schedule]\nstepz = 3\n", ":2: key 'stepz' is not a flag of vtrain train"),
    ("[schedule]\nsteps = \"3\"\n", ":2: key 'steps' is a string, expected an integer"),
    ("[schedule]\nsteps = 0\n", ":2: key 'steps': --steps 0: out of range"),
    ("[schedule]\nwarmdown = 2.0\n", ":2: key 'warmdown': --warmdown 2: out of range"),
    ("[device]\ndevice = \"tpu\"\n", ":2: key 'device': --device tpu: expected one of cpu, cuda, emulated"),
], ids=["unknown-key", "wrong-type", "out-of-range", "number-out-of-range", "bad-choice"])
def test_a_bad_config_file_is_refused_naming_the_file_and_key(data, tmp_path, text, expected):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    r = vt("train", "--data", data, *MODEL, "--steps", "2", "--config", cfg)
    assert r.returncode == 2, r.stdout[-1000:] + r.stderr
    assert f"{cfg}{expected}" in r.stderr, r.stderr
