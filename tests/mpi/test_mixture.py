"""Data mixtures end to end (issue 28 item 1; data/mixture.h): three sources prepared with one
tokenizer (`prepare --tokenizer from:DIR`), blended by weight with a stage that changes the
weights. The same mixture trains on 1 process and on dp2 x pp2 with the same losses (1e-5
relative, as every layout test) and the same tokens per source; a run stopped and resumed on
another layout with other weights continues every source where it stopped (its token count
goes on from the checkpoint's, and the new weights hold from the resume on); each source's
validation is reported; a source with another tokenizer, a stage beyond the run and bad weights
are refused by name before any work."""
import json
import os
import subprocess

import numpy as np
import pytest

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
SEQ = 32
MODEL = ["--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--seq-len", str(SEQ),
         "--window", "8", "--micro-batch", "2", "--eval-tokens", "512"]
GLOBAL = 16 * SEQ  # tokens per step: 16 rows (dp 2 x pp 2: 4 micro-batches of 2 rows per rank)
STEPS = 8


def vt(*args, np_=1, timeout=600):
    cmd = [VTRAIN, *map(str, args)]
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    out = {}
    for name, verses in (("gen", "Gen1:1-Gen12:20"), ("psa", "Psa1:1-Psa30:12"),
                         ("mat", "Mat1:1-Mat8:34")):
        text = subprocess.run(["bible", verses], capture_output=True, text=True).stdout
        (root / f"{name}.txt").write_text(text)
        tok = ["--tokenizer", "bpe:300"] if not out else ["--tokenizer", f"from:{out['gen']}"]
        r = vt("prepare", "--input", root / f"{name}.txt", "--out", root / name, "--quiet",
               "--val-fraction", "0.2", *tok)
        assert r.returncode == 0, r.stderr
        out[name] = root / name
    # The same tokenizer, byte for byte: the mixture's check compares the files.
    assert (out["psa"] / "tokenizer.json").read_bytes() == (out["gen"] / "tokenizer.json").read_bytes()
    text = subprocess.run(["bible", "Rev1:1-Rev5:14"], capture_output=True, text=True).stdout
    (root / "rev.txt").write_text(text)
    r = vt("prepare", "--input", root / "rev.txt", "--out", root / "other_tok", "--quiet",
           "--tokenizer", "bpe:280")
    assert r.returncode == 0, r.stderr
    out["other_tok"] = root / "other_tok"
    return out


def mix(s, w=(0.5, 0.3, 0.2)):
    return f"gen={s['gen']}:{w[0]},psa={s['psa']}:{w[1]},mat={s['mat']}:{w[2]}"


STAGE = f"{4 * GLOBAL}:gen=0.1,psa=0.1,mat=0.8"  # from step 5 on


def records(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [r for r in rows if "loss" in r], [r for r in rows if "val_loss" in r]


def test_same_on_one_process_and_dp2_pp2(sources, tmp_path):
    runs, logs = {}, {}
    for name, np_, layout in (("one", 1, []), ("dp2pp2", 4, ["--pp", "2"])):
        m = tmp_path / f"{name}.jsonl"
        r = vt("train", "--data", mix(sources), "--data-stage", STAGE, *MODEL, *layout,
               "--global-batch", GLOBAL, "--steps", STEPS, "--metrics", m, "--eval-every", 4,
               np_=np_)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        runs[name] = records(m)
        logs[name] = r.stdout
    (one, one_eval), (four, four_eval) = runs["one"], runs["dp2pp2"]
    np.testing.assert_allclose([x["loss"] for x in four], [x["loss"] for x in one], rtol=1e-5)
    assert [x["tokens_by_source"] for x in four] == [x["tokens_by_source"] for x in one]
    by = [x["tokens_by_source"] for x in one]
    assert all(sum(b.values()) == x["tokens"] for b, x in zip(by, one))
    # Stage 1 (0.5 / 0.3 / 0.2) for steps 1-4, then mat at 0.8: mat's share rises.
    first4 = {k: by[3][k] for k in by[3]}
    last4 = {k: by[-1][k] - by[3][k] for k in by[3]}
    assert first4["gen"] > first4["psa"] > first4["mat"] > 0
    assert last4["mat"] > 0.7 * sum(last4.values()), last4
    # Validation: the blend and each source's, on both layouts alike. The blend is under the
    # --data weights for the whole run (a stage switch does not move it), and with stages also
    # under the weights of the stage the run is in (docs/usage.md "Data mixtures").
    assert set(one_eval[-1]["val_by_source"]) == {"gen", "psa", "mat"}
    fixed = {"gen": 0.5, "psa": 0.3, "mat": 0.2}    # --data
    stage2 = {"gen": 0.1, "psa": 0.1, "mat": 0.8}   # the stage the run ends in
    for e, stage, w in ((one_eval[0], 1, {"gen": 0.5, "psa": 0.3, "mat": 0.2}),
                        (one_eval[-1], 2, stage2)):
        by = e["val_by_source"]
        for key in ("val_loss", "val_bpb"):
            assert e[key] == pytest.approx(sum(fixed[k] * by[k][key] for k in by), rel=1e-12)
            assert e[key + "_stage"] == pytest.approx(sum(w[k] * by[k][key] for k in by), rel=1e-12)
        assert e["data_stage"] == stage, e
    assert [x["data_stage"] for x in one] == [1] * 4 + [2] * (STEPS - 4)
    np.testing.assert_allclose(four_eval[-1]["val_loss"], one_eval[-1]["val_loss"], rtol=1e-5)
    np.testing.assert_allclose(four_eval[-1]["val_loss_stage"], one_eval[-1]["val_loss_stage"],
                               rtol=1e-5)
    for out in logs.values():  # the stage switch is said, once, in the step it happens
        assert out.count("data: stage 2 of 2 starts in step 5 (from token 2048): gen 0.1, "
                         "psa 0.1, mat 0.8") == 1, out[-3000:]
        assert "data: mixture, stage 1 of 2: gen 0.5, psa 0.3, mat 0.2; stage 2 from token " \
               "2048: gen 0.1, psa 0.1, mat 0.8" in out, out[:3000]


def test_resume_on_another_layout_with_other_weights(sources, tmp_path):
    ck, m = tmp_path / "ck", tmp_path / "m.jsonl"
    r = vt("train", "--data", mix(sources), *MODEL, "--global-batch", GLOBAL, "--steps", STEPS,
           "--stop-at-step", 3, "--ckpt-dir", ck, "--metrics", m, "--final-eval-tokens", 0)
    assert r.returncode == 75, r.stdout[-3000:] + r.stderr[-3000:]  # stopped, resumable
    before = records(m)[0][-1]["tokens_by_source"]
    # dp 2 (2 ranks), other weights: every source goes on from its position.
    r = vt("train", "--data", mix(sources, (0.2, 0.2, 0.6)), *MODEL, "--global-batch", GLOBAL,
           "--steps", STEPS, "--resume", "auto", "--ckpt-dir", ck, "--metrics", m,
           "--final-eval-tokens", 0, np_=2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "data: the weights changed: now gen 0.2, psa 0.2, mat 0.6" in r.stdout, r.stdout
    train = records(m)[0]
    after = [x for x in train if x["step"] > 3]
    assert [x["step"] for x in after] == list(range(4, STEPS + 1))
    prev = before
    for x in after:
        cur = x["tokens_by_source"]
        assert all(cur[k] >= prev[k] for k in prev)  # nothing re-read from an earlier position
        assert sum(cur.values()) - sum(prev.values()) == GLOBAL  # every row from some source
        prev = cur
    gained = {k: prev[k] - before[k] for k in before}
    rows = {k: v // SEQ for k, v in gained.items()}
    assert rows == {"gen": 16, "psa": 16, "mat": 48}, rows  # 0.2 / 0.2 / 0.6 of 5 x 16 rows


def test_bad_mixtures_are_refused_before_any_work(sources, tmp_path):
    cases = [
        ([f"--data", f"gen={sources['gen']}:1,rev={sources['other_tok']}:1"],
         "source 'rev'", "another tokenizer"),
        (["--data", mix(sources), "--data-stage", f"{STEPS * GLOBAL}:mat=1"],
         "beyond the run", str(STEPS * GLOBAL)),
        (["--data", mix(sources, (-1, 1, 1))], "the weight of 'gen' is -1", "weights are >= 0"),
        (["--data", mix(sources, (0, 0, 0))], "every weight is zero", ""),
        (["--data", f"gen={sources['gen']}:x"], "the weight of 'gen' is 'x', not a number", ""),
        (["--data", f"gen={tmp_path}/none:1"], "source 'gen'", "is not a directory"),
        (["--data", str(sources["gen"]), "--data-stage", "10:gen=1"], "--data-stage needs a mixture", ""),
    ]
    for args, want, want2 in cases:
        ck = tmp_path / "ck_bad"
        r = vt("train", *args, *MODEL, "--global-batch", GLOBAL, "--steps", STEPS, "--ckpt-dir", ck)
        assert r.returncode != 0, args
        assert want in r.stderr and want2 in r.stderr, (args, r.stderr)
        assert not ck.exists() or not any(ck.iterdir()), args  # nothing written
