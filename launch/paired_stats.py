# launch/paired_stats.py owns the statistics of the ablation runner (launch/ablate.py): per-seed
# paired deltas of an arm against the reference arm of the same seed, their mean and 95%
# confidence interval (Student's t with n-1 degrees of freedom), and the verdict against the
# published ordering, which is read from the interval, never from the mean alone.
"""Paired deltas, t intervals and verdicts for ablations.

Pairing: seed s of an arm and seed s of the reference share the initialization seed and the data
order, so delta_s = metric(arm, s) - metric(ref, s) removes the variation the seed causes in
both; the interval of the mean delta is mean +- t(0.975, n-1) * sd / sqrt(n).

Verdicts (lower metric = better, as bits per byte):
  reproduced        the interval lies entirely on the published side of 0
  not reproduced    the interval lies entirely on the other side
  not resolved      the interval contains 0 (or fewer than 2 paired seeds)
Arms with no published claim get the measured direction instead ("better" / "worse" / "not
resolved") and the note "no published claim".
"""
from __future__ import annotations

import math

# Two-sided 95% quantiles of Student's t, t(0.975, df), df = 1..30.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]

# The published direction of each arm against the baseline of its paper (lower loss = "better"),
# with the source. ablate.py --expect ARM=better|worse adds or overrides entries.
PUBLISHED: dict[str, tuple[str, str]] = {
    "v1": ("better", "Bank of Values paper, Table 1 (135M): v1 on the last third 0.847 vs baseline 0.854"),
    "x0v": ("better", "Bank of Values paper, Table 1 (135M): x0v on the last third 0.845 vs 0.854"),
    "bov": ("better", "Bank of Values paper (780M): BoV below the baseline"),
    "resformer-identity": ("better", "ResFormer paper (arXiv 2410.17897) ablation: identity 2.712 vs 2.739"),
    "resformer-constant": ("better", "ResFormer paper: constant lambda 2.700 vs 2.739"),
    "resformer-sparse": ("better", "ResFormer paper: sparse (layers 6-8, lambda 5) 2.687 vs 2.739"),
    "resformer-plus": ("better", "ResFormer paper (468M, 20B tokens): Plus 2.681 vs 2.739"),
    "neutreno": ("better", "ResFormer paper's comparison table: NeuTRENO below the baseline"),
    "resformer-hidden": ("worse", "ResFormer paper ablation: hidden residual to H_0 2.781 vs 2.739"),
    "baseline+dense": ("better", "ResFormer paper's comparison table; DenseFormer paper"),
    "v1+value-layers=all+value-coef=1": (
        "worse", "Bank of Values paper, Table 1 row 3 (135M): v1 on every layer with coefficient 1 "
        "0.872 vs baseline 0.854"),
    "vskipinit": ("worse", "SAS paper (He & Hofmann 2024), Sec. 5 / App. C: Value-SkipInit's "
                  "per-step training loss falls behind pre-LN, more so with depth"),
}


def t975(df: int) -> float:
    """t(0.975, df): the table to 30, then the Cornish-Fisher expansion around z = 1.95996."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def paired_deltas(arm: dict[int, float], ref: dict[int, float]) -> list[float]:
    """metric(arm, s) - metric(ref, s) for each seed s both have a finite value for, in seed
    order."""
    out = []
    for s in sorted(set(arm) & set(ref)):
        a, b = arm[s], ref[s]
        if not (math.isnan(a) or math.isnan(b)):
            out.append(a - b)
    return out


def interval(deltas: list[float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the mean delta's 95% interval; low = high = nan below 2 values."""
    n = len(deltas)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = sum(deltas) / n
    if n < 2:
        return mean, float("nan"), float("nan"), n
    sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


def verdict(low: float, high: float, expected: str | None) -> str:
    """From the interval only (lower = better); `expected` is "better", "worse" or None."""
    if math.isnan(low) or math.isnan(high):
        return "not resolved (under 2 paired seeds)"
    side = "better" if high < 0 else "worse" if low > 0 else None
    if expected is None:
        return f"{side or 'not resolved'} (no published claim)"
    if expected not in ("better", "worse"):
        raise ValueError(f"expected must be better or worse, got {expected!r}")
    if side is None:
        return "not resolved"
    return "reproduced" if side == expected else "not reproduced"
