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
    "v1": ("better", "Bank of Values paper, Table 1 (135M): v1 on the last third 0.847 vs baseline "
           "0.854; Table 3 row 4 (780M): 0.718 vs 0.722"),
    "x0v": ("better", "Bank of Values paper, Table 1 (135M): x0v on the last third 0.845 vs 0.854; "
            "Table 3 row 3 (780M): 0.719 vs 0.722"),
    "bov": ("better", "Bank of Values paper, Table 2 (780M, 100B tokens): 0.663 vs 0.671; Table 3 "
            "row 2: 0.714 vs 0.722"),
    "value-embed": ("better", "Bank of Values paper (780M, 3.91e19 FLOPs): the additive value-"
                    "embedding variant (input-dependent bounded gates, every second layer) 0.712 "
                    "(Table 7) vs the baseline's 0.722 (Table 3 row 1)"),
    "svformer": ("worse", "ResFormer paper (summary in /work/shared/papers): SVFormer needs 12.2% "
                 "more parameters for the baseline's loss; Bank of Values paper, Sec. 1: SVFormer "
                 "reports degraded performance relative to the standard attention baseline"),
    "resformer-identity": ("better", "ResFormer paper (arXiv 2410.17897) ablation: identity 2.712 vs 2.739"),
    "resformer-constant": ("better", "ResFormer paper: constant lambda 2.700 vs 2.739"),
    "resformer-learnable": ("better", "ResFormer paper main table (468M): Learnable ResFormer "
                            "perplexity 23.7 vs Transformer 24.8"),
    "resformer-sparse": ("better", "ResFormer paper: sparse (layers 6-8, lambda 5) 2.687 vs 2.739"),
    "resformer-plus": ("better", "ResFormer paper (468M, 20B tokens): Plus 2.681 vs 2.739"),
    "resformer-plus+plus-init=blagpt+detach-v1": (
        "better", "ResFormer paper (468M, 20B tokens): Plus 2.681 vs 2.739, as erogol/BlaGPT "
        "bla_gpt/resformer.py implements it (logits N(0, 0.1) line 86, a trainable scale "
        "initialized to the depth line 254, V1 detached line 138)"),
    "neutreno": ("better", "ResFormer paper's comparison table: NeuTRENO below the baseline"),
    "resformer-hidden": ("worse", "ResFormer paper ablation: hidden residual to H_0 2.781 vs 2.739"),
    "baseline+dense": ("better", "ResFormer paper's comparison table; DenseFormer paper"),
    "v1+value-layers=all+value-coef=1": (
        "worse", "Bank of Values paper, Table 1 row 3 (135M): v1 on every layer with coefficient 1 "
        "0.872 vs baseline 0.854; Table 3 row 5 (780M): 0.741 vs 0.722"),
    "vskipinit": ("worse", "SAS paper (He & Hofmann 2024), Sec. 5 / App. C: Value-SkipInit's "
                  "per-step training loss falls behind pre-LN, more so with depth"),
}

# Arms that are not a paper's method as published: what they are instead, and why they carry no
# published direction (the table prints the note beside the verdict).
NOTES: dict[str, str] = {
    "resformer-plus+plus-init=blagpt+plus-scale=fixed": (
        "vtrain's earlier resformer-plus (BlaGPT's logits init, the scale fixed at L, V1 not "
        "detached); not BlaGPT's, whose scale is trainable and which detaches V1 "
        "(erogol/BlaGPT bla_gpt/resformer.py lines 138, 254): no published direction"),
}

# E-SPA / U-SPA run only inside sas / sas-p here (the MLP skip kept; the pre-norms too unless
# +norm=none), not as the paper's skipless vanilla model. What the paper's abstract says (He et
# al. 2023, arXiv 2302.10322): without normalisation (skips kept) deep transformers train at
# speeds matching the standard ones; vanilla ones (no skips, no norms) reach the standard loss
# after about 5 times more iterations. Neither is a direction for the hybrid.
HYBRID_NOTE = (
    "hybrid: the E-SPA/U-SPA bias inside {shape} ({kept}), not the paper's skipless vanilla model; "
    "the paper (He et al. 2023, abstract) has vanilla models (no skips, no norms) reach the "
    "standard loss after ~5x more iterations and models without norms (skips kept) match it per "
    "step, neither a direction for this arm: no published claim")


def note(arm: str) -> str | None:
    """Why `arm` has no published direction, where it is a known variant or a hybrid; None
    otherwise."""
    if arm in NOTES:
        return NOTES[arm]
    parts = arm.split("+")
    if any(p.startswith("attn-bias=") for p in parts[1:]):
        kept = "the MLP skip kept" + ("" if "norm=none" in parts else ", and the pre-norms")
        return HYBRID_NOTE.format(shape=parts[0], kept=kept)
    return None


def is_hybrid(arm: str) -> bool:
    n = note(arm)
    return n is not None and n.startswith("hybrid")


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


def verdict(low: float, high: float, expected: str | None, hybrid: bool = False) -> str:
    """From the interval only (lower = better); `expected` is "better", "worse" or None;
    `hybrid` (no claim) labels an arm mixing two papers' methods (note())."""
    if math.isnan(low) or math.isnan(high):
        return "not resolved (under 2 paired seeds)"
    side = "better" if high < 0 else "worse" if low > 0 else None
    if expected is None:
        why = "hybrid, no published claim" if hybrid else "no published claim"
        return f"{side or 'not resolved'} ({why})"
    if expected not in ("better", "worse"):
        raise ValueError(f"expected must be better or worse, got {expected!r}")
    if side is None:
        return "not resolved"
    return "reproduced" if side == expected else "not reproduced"
