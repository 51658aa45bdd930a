# tests/launch/test_hostile_metrics.py owns the launch scripts' answer to hostile metrics and
# outputs (issue 39 item 7): every tool reads through launch/run_metrics.py, which skips a line
# that is not a record (bad JSON, binary garbage, a 50,000-deep nesting, an integer of 5,000
# digits, a step out of range) with a count, and refuses a file holding no record at all, naming
# it; plot_run.py and wandb_follow.py agree on that (no wandb run is made for such a file);
# ablate.py tabulates runs whose values are strings or null (NaN, never a TypeError) and refuses a
# bad --out by name; plot_diagnose.py refuses hostile diagnose files by name. Never a traceback.
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("VTRAIN_BUILD", ROOT / "build"))
LAUNCH = ROOT / "launch"
sys.path.insert(0, str(LAUNCH))
import run_metrics  # noqa: E402

DEEP_LIST = "[" * 50000 + "]" * 50000
DEEP_OBJECT = '{"step": 1, "loss": ' + '{"a": ' * 50000 + "1" + "}" * 50001
HOSTILE = [
    DEEP_LIST,
    DEEP_OBJECT,
    '{"step": ' + "9" * 5000 + ', "loss": 1.0}',          # beyond Python's int conversion
    '{"step": 100000000000000000000, "loss": 1.0}',        # a step out of range
    '{"step": -3, "loss": 1.0}',
    "\x00\x01\x02\xff garbage \x7f",
    "{" * 3000,
    '{"step": 2, "loss": 1.0' + "{" * 5000,
]


def step(s, loss=1.0, **extra):
    return json.dumps({"step": s, "loss": loss, "lr": 0.01, "tokens": 64 * s, "tok_per_s": 100.0,
                       "mfu": 0.1, "grad_norm": 1.0, **extra})


def py(script, *args, env=None, timeout=120):
    return subprocess.run([sys.executable, str(LAUNCH / script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          errors="replace")


@pytest.mark.parametrize("bad", range(len(HOSTILE)))
def test_a_hostile_line_is_skipped_with_a_count(tmp_path, bad):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join([step(1), HOSTILE[bad], step(2), HOSTILE[bad], step(3)]) + "\n",
                 errors="surrogateescape")
    run = run_metrics.read_run(p)
    assert [r["step"] for r in run.steps] == [1, 2, 3]
    assert any("skipped 2 lines that are not a vtrain metrics record" in n and str(p) in n
               for n in run.notes), run.notes


@pytest.mark.parametrize("bad", range(len(HOSTILE)))
def test_a_file_of_hostile_lines_only_is_refused_naming_it(tmp_path, bad):
    p = tmp_path / "m.jsonl"
    p.write_text(HOSTILE[bad] + "\n" + HOSTILE[bad] + "\n", errors="surrogateescape")
    with pytest.raises(run_metrics.MetricsError, match="holds no complete metrics line"):
        run_metrics.read_run(p)


def test_plot_run_skips_bad_lines_and_refuses_a_bad_out(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join([step(1), DEEP_LIST, step(2, loss="a string"), step(3, loss=None),
                            "\x00garbage", step(4)]) + "\n")
    r = py("plot_run.py", p, "--out", tmp_path / "plots")
    assert r.returncode == 0, r.stderr
    assert "skipped 2 lines that are not a vtrain metrics record" in r.stderr, r.stderr
    assert (tmp_path / "plots" / "steps.png").stat().st_size > 0
    (tmp_path / "afile").write_text("mine\n")
    for out, why in ((tmp_path / "afile", "exists and is not a directory"),
                     (tmp_path / "afile" / "sub", "cannot write")):
        r = py("plot_run.py", p, "--out", out)
        assert r.returncode == 2 and f"--out {out}" in r.stderr and why in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.fixture
def wandb_env(tmp_path):
    pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    d = tmp_path / "wandb_home"
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(d),
               WANDB_CONFIG_DIR=str(d / "config"), WANDB_CACHE_DIR=str(d / "cache"),
               WANDB_DATA_DIR=str(d / "data"), WANDB_DISABLE_GIT="true",
               WANDB_DISABLE_CODE="true", HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    d.mkdir()
    return env


@pytest.mark.parametrize("once", [True, False], ids=["once", "follow"])
def test_wandb_follow_and_plot_run_agree_on_garbage(tmp_path, wandb_env, once):
    g = tmp_path / "garbage.jsonl"
    g.write_bytes(os.urandom(4096).replace(b"{", b"(") + b"\n" + DEEP_LIST.encode() + b"\n")
    follow = py("wandb_follow.py", g, "--project", "p", *(["--once"] if once else
                                                          ["--idle", "2", "--poll", "0.2"]),
                env=wandb_env)
    plot = py("plot_run.py", g, "--out", tmp_path / "plots")
    for r in (follow, plot):
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        assert f"{g}: holds no" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not list(Path(wandb_env["WANDB_DIR"]).glob("wandb/*run-*")), "a wandb run was made"
    # Some records among the garbage: both read them, both count what they skipped.
    m = tmp_path / "m.jsonl"
    m.write_text("\n".join([step(1), "\x00\x01", DEEP_OBJECT, step(2)]) + "\n")
    follow = py("wandb_follow.py", m, "--project", "p", "--once", env=wandb_env)
    plot = py("plot_run.py", m, "--out", tmp_path / "plots")
    for r in (follow, plot):
        assert r.returncode == 0, r.stderr[-2000:]
        assert "skipped 2 lines that are not a vtrain metrics record" in r.stderr, r.stderr
    assert "logged 2 records" in follow.stderr, follow.stderr


def ablation_dir(tmp_path, losses):
    """An ablation's --out as a finished one leaves it (no checkpoints): baseline and bov, 4
    steps each with an evaluation at step 4; `losses` holds bov's training-loss values."""
    out = tmp_path / "abl"
    out.mkdir()
    for mode, ls in (("baseline", [4.0, 3.5, 3.0, 2.5]), ("bov", losses)):
        lines = [step(i + 1, loss=v) for i, v in enumerate(ls)]
        lines.insert(2, DEEP_LIST)
        lines.append(json.dumps({"step": 4, "val_loss": 2.0, "val_bpb": 1.5, "val_tokens": 256}))
        (out / f"{mode}.jsonl").write_text("\n".join(lines) + "\n")
    return out


def ablate(tmp_path, out, *extra):
    env = dict(os.environ, VTRAIN_BUILD=str(BUILD))
    vtrain = tmp_path / "vtrain"  # run by nothing here (--report-only): any executable
    vtrain.write_text("#!/bin/sh\nexit 0\n")
    vtrain.chmod(0o755)
    (tmp_path / "data").mkdir(exist_ok=True)
    return py("ablate.py", "--data", tmp_path / "data", "--modes", "baseline,bov", "--steps", 4,
              "--eval-every", 2, "--out", out, "--no-ckpt", "--report-only", "--vtrain", vtrain,
              *extra, env=env)


@pytest.mark.parametrize("losses", [["a", "b", "c", "d"], [None, None, None, None],
                                    [3.0, "x", None, {"nested": 1}]])
def test_ablate_tabulates_runs_with_non_numeric_values(tmp_path, losses):
    out = ablation_dir(tmp_path, losses)
    r = ablate(tmp_path, out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert (out / "ablate.md").exists() and (out / "ablate.png").stat().st_size > 0


def test_ablate_refuses_a_bad_out_by_name(tmp_path):
    (tmp_path / "afile").write_text("mine\n")
    (tmp_path / "empty").mkdir()
    for out, why in ((tmp_path / "afile", "exists and is not a directory"),
                     (tmp_path / "newdir", "no such directory; --report-only rebuilds"),
                     (tmp_path / "empty", "no run of this ablation finished")):
        r = ablate(tmp_path, out)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert f"ablate.py: error: " in r.stderr and str(out) in r.stderr and why in r.stderr, \
            r.stderr
        assert "Traceback" not in r.stderr
    assert (tmp_path / "afile").read_text() == "mine\n" and not (tmp_path / "newdir").exists()


def diagnose_file(**override):
    d = {"embedding_similarity": 0.1, "layers": [
        {"layer": 0, "similarity": 0.2, "head_entropy": [1.0, 1.1], "uniform_entropy": 2.0,
         "v1_share": None}]}
    d.update(override)
    return json.dumps(d)


@pytest.mark.parametrize("text,why", [
    (DEEP_LIST, "not JSON"),
    ('{"layers": ' + DEEP_LIST + "}", "not JSON"),
    (diagnose_file(embedding_similarity="x"), "not a `vtrain diagnose --out` file"),
    (diagnose_file(layers=[1, 2]), "not an object with an integer layer"),
    (diagnose_file(layers=[{"layer": 0, "similarity": "s", "head_entropy": [1.0],
                            "uniform_entropy": 2.0, "v1_share": None}]), "not a number"),
    (diagnose_file(layers=[{"layer": 0, "similarity": 0.1, "head_entropy": [],
                            "uniform_entropy": 2.0, "v1_share": None}]), "not a number"),
    ("\x00\xff", "not JSON"),
])
def test_plot_diagnose_refuses_hostile_files_by_name(tmp_path, text, why):
    p = tmp_path / "d.json"
    p.write_text(text, errors="surrogateescape")
    r = py("plot_diagnose.py", p, "--out", tmp_path / "o.png")
    assert r.returncode == 2 and str(p) in r.stderr and why in r.stderr, r.stderr[-1000:]
    assert "Traceback" not in r.stderr


def test_plot_diagnose_refuses_devices_and_a_directory_out(tmp_path):
    (tmp_path / "d.json").write_text(diagnose_file())
    for args, why in ((["/dev/zero"], "/dev/zero: not a regular file"),
                      ([tmp_path / "d.json", "--out", tmp_path], "is a directory")):
        if "--out" not in args:
            args = args + ["--out", tmp_path / "o.png"]
        r = py("plot_diagnose.py", *args, timeout=600)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = py("plot_diagnose.py", tmp_path / "d.json", "--out", tmp_path / "o.png")
    assert r.returncode == 0, r.stderr
