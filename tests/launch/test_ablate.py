# tests/launch/test_ablate.py owns the end-to-end check of launch/ablate.py: a tiny synthetic
# corpus is prepared with `vtrain prepare`, two value modes are trained for a few steps, and the
# table, the plot and the metrics files must exist and parse. Needs build/vtrain (VTRAIN_BUILD).
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("VTRAIN_BUILD", ROOT / "build"))
ABLATE = ROOT / "launch" / "ablate.py"
TINY = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq-len", "32", "--micro-batch", "2",
        "--eval-tokens", "256"]


def vtrain() -> Path:
    p = BUILD / "vtrain"
    if not p.exists():
        pytest.fail(f"{p} not found; build the vtrain target first (VTRAIN_BUILD={BUILD})")
    return p


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ablate_data")
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 6))) for _ in range(50)]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) + "."
                     for _ in range(500))  # about 20 KB
    (tmp / "corpus.txt").write_text(text)
    out = tmp / "data"
    r = subprocess.run([str(vtrain()), "prepare", "--input", str(tmp / "corpus.txt"), "--out",
                        str(out), "--tokenizer", "bpe:300", "--val-fraction", "0.1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def run_ablate(*args, timeout=120):
    env = dict(os.environ, VTRAIN_BUILD=str(BUILD), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(ABLATE), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_two_modes_make_table_plot_and_metrics(data_dir, tmp_path):
    out = tmp_path / "ablate"
    r = run_ablate("--data", data_dir, "--modes", "baseline,bov", "--steps", 5, "--eval-every", 2,
                   "--out", out, "--", *TINY)
    assert r.returncode == 0, f"ablate.py failed:\n{r.stdout}\n{r.stderr}"
    # Progress: one start and one done line per run.
    for mode in ("baseline", "bov"):
        assert f"{mode}: started" in r.stdout and f"{mode}: done" in r.stdout, r.stdout

    md = (out / "ablate.md").read_text()
    rows = [l for l in md.splitlines() if l.startswith("| ") and not l.startswith("| run")]
    assert [row.split("|")[1].strip() for row in rows] == ["baseline", "bov"], md
    header = next(l for l in md.splitlines() if l.startswith("| run"))
    assert "final val bpb" in header and "delta bpb vs baseline" in header and "tok/s" in header
    assert "speed vs baseline" in header and "ms/step" in header
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    for c in cells:
        assert c[2].endswith("M")                          # params
        val_loss, val_bpb = float(c[3]), float(c[4])
        assert 0 < val_bpb < 20 and 0 < val_loss < 20
        float(c[5])                                        # delta
        assert float(c[6].replace(",", "")) > 0            # tok/s
        assert float(c[7]) > 0                             # ms/step
        assert float(c[8].rstrip("x")) > 0                 # speed
    assert cells[0][5] == "+0.0000" and cells[0][8] == "1.000x"  # baseline vs itself
    # bov has value tables: more parameters than baseline.
    assert float(cells[1][2][:-1]) > float(cells[0][2][:-1])
    # The table printed to stdout is the same one.
    assert rows[0] in r.stdout

    png = (out / "ablate.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000

    for mode in ("baseline", "bov"):
        recs = [json.loads(l) for l in (out / f"{mode}.jsonl").read_text().splitlines() if l.strip()]
        train = [x for x in recs if "loss" in x]
        evals = [x for x in recs if "val_bpb" in x]
        assert [x["step"] for x in train] == [1, 2, 3, 4, 5]
        assert [x["step"] for x in evals] == [0, 2, 4, 5]
        assert all(x["tok_per_s"] > 0 for x in train)
        assert (out / f"{mode}.log").read_text().startswith("$ ")


def test_blocks_over_seeds_and_depths(data_dir, tmp_path):
    # Block-shape arms with their own flags, two seeds (mean +- spread) and two depths.
    out = tmp_path / "blocks"
    r = run_ablate("--data", data_dir, "--blocks", "prenorm,sas-p+norm=none", "--seeds", "1,2",
                   "--depths", "1,2", "--steps", 3, "--eval-every", 3, "--out", out, "--",
                   *TINY[2:], timeout=240)
    assert r.returncode == 0, f"ablate.py failed:\n{r.stdout}\n{r.stderr}"
    md = (out / "ablate.md").read_text()
    header = next(l for l in md.splitlines() if l.startswith("| run"))
    assert "final val bpb +- std" in header and "speed vs prenorm" in header, header
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in md.splitlines()
            if l.startswith("| ") and not l.startswith("| run")]
    assert [(c[0], c[1]) for c in rows] == [("prenorm", "1"), ("sas-p+norm=none", "1"),
                                            ("prenorm", "2"), ("sas-p+norm=none", "2")], md
    for c in rows:
        assert "+-" in c[4]
    # Identity value/output projections: fewer parameters than prenorm at depth 2.
    assert float(rows[3][2][:-1]) < float(rows[2][2][:-1]), md
    runs = json.loads((out / "runs.json").read_text())
    assert len(runs) == 8 and all(x["returncode"] == 0 for x in runs)
    sas = next(x for x in runs if x["arm"] == "sas-p+norm=none" and x["depth"] == 2)
    cmd = sas["cmd"]
    assert cmd[cmd.index("--block") + 1] == "sas-p" and cmd[cmd.index("--norm") + 1] == "none"
    assert cmd[cmd.index("--layers") + 1] == "2"
    assert (out / "ablate.png").read_bytes()[:4] == b"\x89PNG"


def test_report_only_rebuilds_the_table_of_an_interrupted_ablation(data_dir, tmp_path):
    # Two seeds of two arms trained; then the table is rebuilt from the directory alone after one
    # run's metrics are cut short (as an interrupted ablation leaves them) and its seed-2 partner
    # never ran: the finished runs give the same rows, the others are named and left out.
    out = tmp_path / "ablate"
    args = ["--data", data_dir, "--modes", "baseline,resformer-identity", "--seeds", "1,2",
            "--steps", 4, "--eval-every", 2, "--out", out, "--no-ckpt", "--", *TINY]
    r = run_ablate(*args, timeout=240)
    assert r.returncode == 0, f"ablate.py failed:\n{r.stdout}\n{r.stderr}"
    full = (out / "ablate.md").read_text()
    cut = out / "resformer-identity_s2.jsonl"
    lines = cut.read_text().splitlines(keepends=True)
    cut.write_text("".join(l for l in lines if '"step": 4' not in l and '"step":4' not in l))
    (out / "ablate.md").unlink()
    r = run_ablate("--report-only", *args)
    assert r.returncode == 0, f"ablate.py --report-only failed:\n{r.stdout}\n{r.stderr}"
    assert "3 of 4 runs finished" in r.stdout and "resformer-identity_s2" in r.stdout, r.stdout
    md = (out / "ablate.md").read_text()
    rows = {l.split("|")[1].strip(): l for l in md.splitlines() if l.startswith("| ") and
            not l.startswith("| run")}
    full_rows = {l.split("|")[1].strip(): l for l in full.splitlines() if l.startswith("| ") and
                 not l.startswith("| run")}
    # baseline: both seeds in both tables; its bpb column is the same.
    assert rows["baseline"].split("|")[5] == full_rows["baseline"].split("|")[5], (md, full)
    assert "(1)" in rows["resformer-identity"], md  # one paired seed left


def test_failed_run_is_reported_with_its_error(data_dir, tmp_path):
    r = run_ablate("--data", data_dir, "--modes", "baseline,no-such-mode", "--steps", 2,
                   "--out", tmp_path / "bad", "--", *TINY)
    assert r.returncode != 0
    assert "run 'no-such-mode' failed" in r.stderr
    assert "unknown value mode 'no-such-mode'" in r.stderr  # vtrain's own message, shown
    assert not (tmp_path / "bad" / "ablate.md").exists()


def test_reserved_flags_are_refused(data_dir, tmp_path):
    r = run_ablate("--data", data_dir, "--modes", "baseline", "--steps", 2, "--out", tmp_path,
                   "--", "--seed", "3")
    assert r.returncode == 2 and "--seed after `--` is set by ablate.py" in r.stderr


def table_rows(md: str) -> dict[str, list[str]]:
    return {c[0]: c for c in ([x.strip() for x in l.strip("|").split("|")] for l in md.splitlines()
                              if l.startswith("| ") and not l.startswith("| run"))}


def test_match_params_adds_a_widened_control_and_its_paired_column(data_dir, tmp_path):
    # bov carries value tables: the control is baseline widened to bov's parameter count, and
    # the parameter counts read back from the checkpoints (not from the planner ablate_match
    # used) put the control nearer bov than the baseline is.
    out = tmp_path / "match"
    r = run_ablate("--data", data_dir, "--modes", "baseline,bov", "--seeds", "1,2", "--steps", 3,
                   "--eval-every", 3, "--match", "params", "--out", out, "--", *TINY,
                   timeout=240)
    assert r.returncode == 0, f"ablate.py failed:\n{r.stdout}\n{r.stderr}"
    md = (out / "ablate.md").read_text()
    rows = table_rows(md)
    assert list(rows) == ["baseline", "bov", "baseline~params:bov"], md
    header = next(l for l in md.splitlines() if l.startswith("| run"))
    assert "paired delta bpb vs matched control" in header and "verdict (matched)" in header
    p = {k: float(v[2][:-1]) for k, v in rows.items()}
    assert abs(p["baseline~params:bov"] - p["bov"]) < abs(p["baseline"] - p["bov"]) / 4, md
    # bov's matched cell: a paired delta over both seeds, and a verdict.
    assert rows["bov"][11].endswith("(2)") and rows["bov"][12] != "-", rows["bov"]
    assert rows["baseline~params:bov"][11] == "(a control)"
    runs = json.loads((out / "runs.json").read_text())
    ctl = next(x["cmd"] for x in runs if x["arm"] == "baseline~params:bov")
    assert ctl.count("--dim") == 1 and ctl[ctl.index("--value") + 1] == "baseline"
    assert int(ctl[ctl.index("--dim") + 1]) > 64
    assert "matched controls (--match params" in md and "`baseline~params:bov` = " in md


def test_match_flops_runs_the_reference_longer(data_dir, tmp_path):
    # The control's step count is steps x (FLOPs per token of the arm / of baseline), the FLOPs
    # per token as `vtrain train` counts them for its MFU (mfu / tok_per_s is FLOPs per token
    # over the same peak), not from the planner ablate_match.py asked.
    out = tmp_path / "flops"
    # svformer drops the value projection of its target layers: fewer FLOPs per token.
    r = run_ablate("--data", data_dir, "--modes", "baseline,svformer", "--steps", 40,
                   "--eval-every", 40, "--match", "flops", "--out", out, "--", *TINY,
                   timeout=240)
    assert r.returncode == 0, f"ablate.py failed:\n{r.stdout}\n{r.stderr}"
    runs = json.loads((out / "runs.json").read_text())
    ctl = next(x["cmd"] for x in runs if x["arm"] == "baseline~flops:svformer")
    steps = int(ctl[ctl.index("--steps") + 1])
    recs = {a: [json.loads(l) for l in (out / f"{n}.jsonl").read_text().splitlines() if l]
            for a, n in (("baseline", "baseline"), ("svformer", "svformer"))}
    def fpt(a):
        return next(x["mfu"] / x["tok_per_s"] for x in recs[a] if "mfu" in x)
    assert steps == round(40 * fpt("svformer") / fpt("baseline")) != 40
    # value-embed costs (to rounding) what baseline does: no control run, and the reason given.
    r = run_ablate("--data", data_dir, "--modes", "baseline,value-embed", "--steps", 4,
                   "--eval-every", 4, "--match", "flops", "--out", tmp_path / "same", "--", *TINY)
    assert r.returncode == 0, r.stderr
    assert "value-embed: no control run" in r.stdout and "is the match" in r.stdout, r.stdout


def test_match_is_refused_where_it_cannot_apply(data_dir, tmp_path):
    r = run_ablate("--data", data_dir, "--modes", "baseline,bov", "--depths", "1,2", "--steps", 2,
                   "--match", "params", "--out", tmp_path / "a", "--", *TINY[2:])
    assert r.returncode == 2 and "--match takes one depth" in r.stderr
    r = run_ablate("--data", data_dir, "--modes", "baseline", "--steps", 2, "--match", "flops",
                   "--out", tmp_path / "b", "--", *TINY)
    assert r.returncode == 2 and "--match needs an arm besides the reference" in r.stderr
    r = run_ablate("--data", data_dir, "--modes", "baseline,bov", "--steps", 2, "--match", "size",
                   "--out", tmp_path / "c", "--", *TINY)
    assert r.returncode == 2 and "invalid choice: 'size'" in r.stderr
