"""The questionable cases of issue 39, as decided (docs/usage.md "Data mixtures" and "Exporting a
model", docs/design.md "Test hooks"): each one refused by name, before any work, and nothing
written.

- a mixture source that is not a prepared directory is named as such (not "another tokenizer");
- a weight or a stage boundary is decimal (0x10 was read as 16);
- a stage boundary no row of the run starts at or after is refused (it would never take effect);
- a key given twice in one object of a mixture .json is refused (the last won silently);
- a mixture checkpoint resumed on one directory says so (was "malformed loader state {json}"),
  and NAME=DIR:1 continues it;
- eval, diagnose and export given a mixture spec as --data say it is not a data directory;
- eval, diagnose and export given --data of another tokenizer of the same vocabulary size are
  refused when the checkpoint's run saved its tokenizer beside it;
- the test-only VTRAIN_INJECT_SLOW_RANK refuses inf and a rank the run does not have."""
import json
import os
import subprocess

import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.abspath(os.path.join(BUILD, "vtrain"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
MODEL = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq-len", "32", "--window", "16",
         "--micro-batch", "2", "--eval-tokens", "256"]


def vt(*args, env=None, cwd=None):
    return subprocess.run([VTRAIN, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env or ENV, timeout=300)


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("decided")
    for name, verses in (("a", "Gen1:1-Gen4:26"), ("other", "Exo1:1-Exo5:20")):
        text = subprocess.run(["bible", verses], capture_output=True, text=True).stdout
        (root / f"{name}.txt").write_text(text)
    assert vt("prepare", "--input", root / "a.txt", "--out", root / "a", "--tokenizer", "bpe:300",
              "--quiet").returncode == 0
    assert vt("prepare", "--input", root / "a.txt", "--out", root / "b", "--tokenizer",
              f"from:{root / 'a'}", "--quiet").returncode == 0
    # Same vocabulary size, another tokenizer (trained on other text).
    assert vt("prepare", "--input", root / "other.txt", "--out", root / "other", "--tokenizer",
              "bpe:300", "--quiet").returncode == 0
    assert (root / "other" / "tokenizer.json").read_bytes() != (root / "a" / "tokenizer.json").read_bytes()
    (root / "unprepared").mkdir()
    r = vt("train", "--data", root / "a", *MODEL, "--steps", 2, "--ckpt-dir", root / "ck")
    assert r.returncode == 0, r.stderr
    r = vt("train", "--data", f"web={root / 'a'}:1,code={root / 'b'}:1", *MODEL, "--steps", 2,
           "--ckpt-dir", root / "mixck")
    assert r.returncode == 0, r.stderr
    return root


def refused(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    for f in fragments:
        assert f in r.stderr, (f, r.stderr[-1500:])
    assert r.stderr.count("error:") == 1, r.stderr


def test_an_unprepared_source_is_named_as_such(w, tmp_path):
    for spec in (f"x={w / 'a'}:1,y={w / 'unprepared'}:1", f"y={w / 'unprepared'}:1,x={w / 'a'}:1"):
        r = vt("train", "--data", spec, *MODEL, "--steps", 1, "--ckpt-dir", tmp_path / "ck")
        refused(r, f"source 'y' ({w / 'unprepared'}) is not a prepared data directory (no "
                   "tokenizer.json)")
        assert "another tokenizer" not in r.stderr and not (tmp_path / "ck").exists()


@pytest.mark.parametrize("weight", ["0x10", "0X1", "0x1p4", "1_0", "inf", "nan", " 1"])
def test_a_weight_is_a_decimal_number(w, weight):
    refused(vt("train", "--data", f"x={w / 'a'}:{weight},y={w / 'b'}:1", *MODEL, "--steps", 1),
            "the weight of 'x' is", "not a number")


@pytest.mark.parametrize("at", ["0x40", "0x1p10", "-64"])
def test_a_stage_boundary_is_a_decimal_number(w, at):
    refused(vt("train", "--data", f"x={w / 'a'}:1,y={w / 'b'}:1", "--data-stage", f"{at}:x=1",
               *MODEL, "--steps", 1), f"the boundary '{at}' is not a whole number of tokens")


@pytest.mark.parametrize("at,ok", [(1000, False), (993, False), (992, True)])
def test_a_stage_that_could_never_take_effect_is_refused(w, tmp_path, at, ok):
    """16 steps of 64 tokens in rows of 32: the last row starts at token 992."""
    r = vt("train", "--data", f"x={w / 'a'}:1,y={w / 'b'}:1", "--data-stage", f"{at}:x=0,y=1",
           *MODEL, "--steps", 16, "--global-batch", 64, "--ckpt-dir", tmp_path / "ck")
    if ok:
        assert r.returncode == 0, r.stderr
    else:
        refused(r, f"--data-stage at {at} tokens would never take effect", "at most 992")
        assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("where", ["source", "top", "stage"])
def test_a_key_given_twice_in_a_mixture_file_is_refused(w, tmp_path, where):
    src = '{"name": "x", "dir": "%s", "weight": 1%s}' % (w / "a", ', "weight": 3' if where == "source" else "")
    stage = '{"at_tokens": 64, "weights": {"x": 1, "y": 0%s}}' % (', "x": 0' if where == "stage" else "")
    text = '{"sources": [%s, {"name": "y", "dir": "%s", "weight": 1}], "stages": [%s]%s}' % (
        src, w / "b", stage, ', "stages": []' if where == "top" else "")
    f = tmp_path / "mix.json"
    f.write_text(text)
    key = {"source": "weight", "top": "stages", "stage": "x"}[where]
    refused(vt("train", "--data", f, *MODEL, "--steps", 4), f'the key "{key}" appears twice')


def test_a_mixture_checkpoint_resumed_on_one_directory_says_so(w, tmp_path):
    ck = tmp_path / "ck"
    subprocess.run(["cp", "-a", str(w / "mixck"), str(ck)], check=True)
    before = sorted(p.name for p in ck.iterdir())
    r = vt("train", "--data", w / "a", *MODEL, "--steps", 4, "--ckpt-dir", ck, "--resume", "auto",
           "--allow-other-data")
    refused(r, "the checkpoint's loader state is a mixture's (sources code, web)",
            "NAME=DIR:1")
    assert "malformed" not in r.stderr
    assert sorted(p.name for p in ck.iterdir()) == before
    r = vt("train", "--data", f"web={w / 'a'}:1", *MODEL, "--steps", 4, "--ckpt-dir", ck,
           "--resume", "auto", "--allow-other-data")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("cmd", ["eval", "diagnose", "export"])
def test_eval_diagnose_export_take_one_directory_of_the_checkpoint_tokenizer(w, tmp_path, cmd):
    ckpt = w / "ck" / "step_00000002.h5"
    extra = {"eval": [], "diagnose": ["--tokens", 512], "export": ["--out", tmp_path / "e"]}[cmd]
    r = vt(cmd, "--ckpt", ckpt, "--data", f"x={w / 'a'}:1,y={w / 'b'}:1", *extra)
    refused(r, "is not a data directory", "give one source's directory")
    assert "cannot open tokenizer file" not in r.stderr
    r = vt(cmd, "--ckpt", ckpt, "--data", w / "other", *extra)
    refused(r, f"--data {w / 'other'} has another tokenizer than the checkpoint's run")
    assert not (tmp_path / "e").exists()
    r = vt(cmd, "--ckpt", ckpt, "--data", w / "b", *extra)  # the same tokenizer (from:a)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("value,why", [
    ("0:inf", "seconds in [0, 3600]"), ("0:nan", "seconds in [0, 3600]"),
    ("0:1e9", "seconds in [0, 3600]"), ("0:-1", "seconds in [0, 3600]"),
    ("1:0.1", "rank 1 is not a world rank (the run has 1 ranks)"),
    ("99999999999:0.1", "expected RANK:SECONDS"),
])
def test_the_slow_rank_hook_refuses_what_cannot_be_run(w, tmp_path, value, why):
    r = vt("train", "--data", w / "a", *MODEL, "--steps", 1, "--ckpt-dir", tmp_path / "ck",
           env=dict(ENV, VTRAIN_INJECT_SLOW_RANK=value))
    refused(r, why)
