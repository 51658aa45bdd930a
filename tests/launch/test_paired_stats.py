"""launch/paired_stats.py and the table of launch/ablate.py on made-up runs (no training):
t quantiles, paired deltas over the seeds both arms have, the interval, and verdicts read from
the interval only (a mean on the published side with an interval across 0 is not resolved)."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "launch"))
import ablate  # noqa: E402
import paired_stats as ps  # noqa: E402


def test_t_quantiles():
    assert ps.t975(1) == 12.706 and ps.t975(2) == 4.303 and ps.t975(30) == 2.042
    # Beyond the table the expansion continues it smoothly towards z = 1.96.
    assert 2.0 < ps.t975(40) < 2.042 and abs(ps.t975(10**6) - 1.95996) < 1e-4
    assert ps.t975(31) < ps.t975(30)
    with pytest.raises(ValueError):
        ps.t975(0)


def test_paired_deltas_use_the_common_finite_seeds():
    arm = {1: 1.70, 2: 1.75, 3: 1.80, 4: float("nan")}
    ref = {1: 1.72, 2: 1.78, 4: 1.9, 5: 1.8}
    d = ps.paired_deltas(arm, ref)
    assert d == pytest.approx([-0.02, -0.03])


def test_interval_of_three_seeds():
    mean, lo, hi, n = ps.interval([-0.01, -0.02, -0.03])
    assert n == 3 and mean == pytest.approx(-0.02)
    half = 4.303 * 0.01 / math.sqrt(3)  # sd of (-1, -2, -3) cents is 1 cent
    assert lo == pytest.approx(-0.02 - half) and hi == pytest.approx(-0.02 + half)
    assert math.isnan(ps.interval([0.5])[1]) and ps.interval([])[3] == 0


@pytest.mark.parametrize("lo,hi,expected,want", [
    (-0.03, -0.01, "better", "reproduced"),
    (0.01, 0.03, "better", "not reproduced"),
    (-0.03, 0.01, "better", "not resolved"),
    (0.01, 0.03, "worse", "reproduced"),
    (-0.03, -0.01, None, "better (no published claim)"),
    (float("nan"), float("nan"), "better", "not resolved (under 2 paired seeds)"),
])
def test_verdicts(lo, hi, expected, want):
    assert ps.verdict(lo, hi, expected) == want


def rows_for(arm, bpbs):
    return [{"mode": f"{arm}-s{s}", "arm": arm, "depth": None, "seed": s, "ok": True,
             "train": [], "evals": [], "params": 1_000_000, "val_loss": b * 0.7, "val_bpb": b,
             "tok_s": 1000.0, "tokens": 100, "tokens_per_step": 10.0}
            for s, b in enumerate(bpbs, start=1)]


def test_table_verdict_comes_from_the_interval_not_the_mean():
    # v1 is 0.01 better on every seed (reproduced); bov is better on average but not on every
    # seed, with an interval across 0 (not resolved); x0v is worse on every seed.
    rows = (rows_for("baseline", [1.80, 1.90, 1.85]) + rows_for("v1", [1.79, 1.89, 1.84])
            + rows_for("bov", [1.70, 1.95, 1.84]) + rows_for("x0v", [1.81, 1.91, 1.86]))
    md, ref = ablate.table(rows, None, {"v1": "better", "bov": "better", "x0v": "better"})
    assert ref == "baseline"
    cells = {l.split("|")[1].strip(): [c.strip() for c in l.strip("|").split("|")]
             for l in md.splitlines() if l.startswith("| ") and not l.startswith("| run")}
    assert cells["baseline"][10] == "reference"
    assert cells["v1"][10] == "reproduced" and cells["v1"][9].startswith("-0.0100 [")
    assert cells["v1"][9].endswith("(3)")
    assert cells["bov"][10] == "not resolved"
    assert cells["x0v"][10] == "not reproduced"
    # The mean-of-bpb delta column is unchanged by the pairing.
    assert cells["bov"][5] == "-0.0200"
