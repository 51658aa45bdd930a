"""`vtrain train --tensorboard DIR` (issue 28 item 2): TensorBoard's own reader
(tensorboard.backend.event_processing.event_accumulator) reads the event files back: every
scalar of the metrics JSONL at its step (as float32), the evaluations, the configuration as text;
a resumed run adds a file that the reader joins into one run going on from the checkpoint."""
import json
import os
import subprocess

import pytest

from tensorboard.backend.event_processing import event_accumulator as ea  # scripts/requirements.txt

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "2", "--eval-tokens", "256", "--eval-every", "2"]


def vt(*args):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, env=ENV,
                          timeout=300)


def read(tb):
    acc = ea.EventAccumulator(str(tb), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb")
    text = subprocess.run(["bible", "Gen1:1-Gen4:26"], capture_output=True, text=True).stdout
    (root / "c.txt").write_text(text)
    r = vt("prepare", "--input", root / "c.txt", "--out", root / "data", "--tokenizer",
           "bpe:300", "--quiet")
    assert r.returncode == 0, r.stderr
    return root / "data"


def test_event_files_hold_every_metric(data, tmp_path):
    tb, m, ck = tmp_path / "tb", tmp_path / "m.jsonl", tmp_path / "ck"
    r = vt("train", "--data", data, *MODEL, "--steps", 6, "--stop-at-step", 4,
           "--ckpt-dir", ck, "--metrics", m, "--tensorboard", tb)
    assert r.returncode == 75, r.stdout + r.stderr
    r = vt("train", "--data", data, *MODEL, "--steps", 6, "--resume", "auto",
           "--ckpt-dir", ck, "--metrics", m, "--tensorboard", tb)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(list(tb.glob("events.out.tfevents.*"))) == 2
    acc = read(tb)
    tags = acc.Tags()
    recs = [json.loads(l) for l in m.read_text().splitlines() if l.strip()]
    train = [x for x in recs if "loss" in x]
    evals = [x for x in recs if "val_loss" in x]
    for key in ("loss", "lr", "tokens", "tok_per_s", "mfu", "grad_norm"):
        assert key in tags["scalars"], (key, tags["scalars"])
        got = {e.step: e.value for e in acc.Scalars(key)}
        assert sorted(got) == [x["step"] for x in train], key
        for x in train:
            assert got[x["step"]] == pytest.approx(x[key], rel=1e-6, abs=1e-30), key
    got = {e.step: e.value for e in acc.Scalars("val_bpb")}
    assert {x["step"]: pytest.approx(x["val_bpb"], rel=1e-6) for x in evals} == got
    cfg = acc.Tensors("config")
    assert len(cfg) == 2  # one per run segment: at step 0 and at the resumed step 4
    assert sorted(c.step for c in cfg) == [0, 4]
    text = cfg[0].tensor_proto.string_val[0].decode()
    assert '"data_dir"' in text and '"steps": 6' in text


def test_unwritable_directory_is_refused(data, tmp_path):
    (tmp_path / "file").write_text("x")
    r = vt("train", "--data", data, *MODEL, "--steps", 1, "--tensorboard", tmp_path / "file" / "tb")
    assert r.returncode != 0
    assert f"--tensorboard {tmp_path / 'file' / 'tb'}: cannot create the directory" in r.stderr
