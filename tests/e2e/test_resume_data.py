"""A checkpoint identifies its training data (issue 25, item 9): the same corpus prepared with
another --shuffle-seed has the same shard and token counts but is other data, so resuming on it
is refused (exit 2, naming both fingerprints and --allow-other-data) and nothing is written; with
--allow-other-data it resumes with a note. A copy of the checkpoint's own data directory
elsewhere is the same data (the fingerprint is content, not path); another tokenizer of the
same vocabulary size on the same text is other data. A resume that changes the options shaping
the run (global batch, seed, learning rates, schedule) is accepted with a note naming each."""
import json
import os
import shutil
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
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("resumedata")
    # Many short documents (one per line of a JSON lines file), so that a shuffle reorders them.
    verses = subprocess.run(["bible", "Gen1:1-Gen12:20"], capture_output=True,
                            text=True).stdout.splitlines()
    with open(root / "c.jsonl", "w") as f:
        for v in verses:
            if v.strip():
                f.write(json.dumps({"text": v}) + "\n")
    out = {}
    for name, extra in {"a": ["--shuffle-seed", "1"], "b": ["--shuffle-seed", "2"]}.items():
        r = vt("prepare", "--input", root / "c.jsonl", "--out", root / name, "--tokenizer",
               "bpe:300", "--quiet", *extra)
        assert r.returncode == 0, r.stderr
        out[name] = root / name
    ma, mb = (json.loads((out[k] / "meta.json").read_text()) for k in "ab")
    assert ma["train"]["tokens"] == mb["train"]["tokens"]  # the same counts: only the order differs
    r = vt("prepare", "--input", root / "c.jsonl", "--out", root / "tok", "--tokenizer", "bpe:300",
           "--tokenizer-sample-bytes", "20000", "--quiet", "--shuffle-seed", "1")
    assert r.returncode == 0, r.stderr
    out["tok"] = root / "tok"
    shutil.copytree(out["a"], root / "a_copy")
    out["a_copy"] = root / "a_copy"
    return out


def train(data, ck, steps, *extra):
    return vt("train", "--data", data, *MODEL, "--steps", steps, "--ckpt-dir", ck, *extra)


def test_resume_on_other_data_is_refused_unless_allowed(dirs, tmp_path):
    ck = tmp_path / "ck"
    r = train(dirs["a"], ck, 2)
    assert r.returncode == 0, r.stderr[-2000:]
    before = sorted(p.name for p in ck.iterdir())
    r = train(dirs["b"], ck, 4, "--resume", "auto")
    assert r.returncode == 2, r.stdout[-2000:]
    assert "is not the data" in r.stderr and "--allow-other-data" in r.stderr, r.stderr
    assert "data fingerprint v1:" in r.stderr
    assert sorted(p.name for p in ck.iterdir()) == before
    r = train(dirs["b"], ck, 4, "--resume", "auto", "--allow-other-data")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "note: --allow-other-data" in r.stdout


def test_a_copy_of_the_same_data_resumes_and_another_tokenizer_does_not(dirs, tmp_path):
    ck = tmp_path / "ck"
    assert train(dirs["a"], ck, 2).returncode == 0
    r = train(dirs["a_copy"], ck, 3, "--resume", "auto")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fingerprint" not in r.stdout + r.stderr
    r = train(dirs["tok"], ck, 4, "--resume", "auto")
    assert r.returncode == 2 and "is not the data" in r.stderr, r.stdout[-1500:] + r.stderr


def test_changed_run_options_are_noted_on_resume(dirs, tmp_path):
    ck = tmp_path / "ck"
    assert train(dirs["a"], ck, 2, "--seed", "7").returncode == 0
    r = train(dirs["a"], ck, 3, "--resume", "auto", "--seed", "8", "--lr-scale", "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "note: resuming with options that differ" in r.stdout, r.stdout[-2000:]
    assert "seed 7 -> 8" in r.stdout and "lr_scale 1.0 -> 0.5" in r.stdout, r.stdout[-2000:]
    # The same options as the checkpoint's run (a longer --steps is no change of course): no note.
    r = train(dirs["a"], ck, 4, "--resume", "auto", "--seed", "8", "--lr-scale", "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "options that differ" not in r.stdout, r.stdout[-2000:]
