#!/usr/bin/env python3
# launch/plot_diagnose.py owns drawing `vtrain diagnose --out FILE.json` results of several runs
# side by side (docs/usage.md "Over-smoothing diagnostics"): per layer the mean cosine similarity
# between token representations (the embedding first), the mean attention entropy over heads
# (with the uniform-attention entropy of each layer's window dotted), and the V1 / value-table
# share of target layers. Standard library + matplotlib.
"""Plot per-layer over-smoothing diagnostics of several runs into one PNG.

    python launch/plot_diagnose.py baseline=runs/base.json bov=runs/bov.json --out diag.png

Each argument is a JSON file written by `vtrain diagnose --out`, optionally labelled NAME=FILE
(default label: the file's stem). Prints one line per run (its similarity per layer).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


class DiagnoseError(Exception):
    pass


def load(spec: str) -> tuple[str, dict]:
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = Path(spec).stem, spec
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise DiagnoseError(f"{path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise DiagnoseError(f"{path}: not JSON ({e})") from e
    if not isinstance(d, dict) or not isinstance(d.get("layers"), list) or not d["layers"] \
            or "embedding_similarity" not in d:
        raise DiagnoseError(f"{path}: not a `vtrain diagnose --out` file (no layers / "
                            "embedding_similarity)")
    for row in d["layers"]:
        for key in ("similarity", "head_entropy", "uniform_entropy", "v1_share"):
            if key not in row:
                raise DiagnoseError(f"{path}: layer {row.get('layer')} has no {key}")
    return name, d


def plot(runs: list[tuple[str, dict]], out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker.MaxNLocator)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, d in runs:
        layers = [r["layer"] for r in d["layers"]]
        sim = [d["embedding_similarity"]] + [r["similarity"] for r in d["layers"]]
        line, = axes[0].plot([-1] + layers, sim, marker="o", label=name)
        ent = [sum(r["head_entropy"]) / len(r["head_entropy"]) for r in d["layers"]]
        axes[1].plot(layers, ent, marker="o", color=line.get_color(), label=name)
        axes[1].plot(layers, [r["uniform_entropy"] for r in d["layers"]], ls=":",
                     color=line.get_color(), alpha=0.5)
        share = [(r["layer"], r["v1_share"]) for r in d["layers"] if r["v1_share"] is not None]
        if share:
            axes[2].plot(*zip(*share), marker="o", color=line.get_color(), label=name)
    axes[0].set_title("token similarity (mean pairwise cosine)")
    axes[0].set_xlabel("layer (-1: embedding)")
    axes[1].set_title("attention entropy, mean over heads (dotted: uniform)")
    axes[1].set_xlabel("layer")
    axes[1].set_ylabel("nats")
    axes[2].set_title("V1 / value-table share of target values")
    axes[2].set_xlabel("layer")
    axes[2].set_ylim(0, 1.05)
    for ax in axes:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="[NAME=]FILE.json written by `vtrain diagnose --out`")
    ap.add_argument("--out", required=True, help="the PNG to write")
    a = ap.parse_args(argv)
    try:
        runs = [load(s) for s in a.runs]
    except DiagnoseError as e:
        print(f"plot_diagnose: error: {e}", file=sys.stderr)
        return 2
    names = [n for n, _ in runs]
    if len(set(names)) != len(names):
        print(f"plot_diagnose: error: two runs are labelled alike ({', '.join(names)}): "
              "give NAME=FILE", file=sys.stderr)
        return 2
    for name, d in runs:
        sims = " ".join(f"{r['similarity']:.3f}" for r in d["layers"])
        print(f"{name}: similarity emb {d['embedding_similarity']:.3f} | layers {sims}")
    plot(runs, a.out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
