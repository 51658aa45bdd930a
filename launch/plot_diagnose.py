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


MAX_BYTES = 64 << 20  # a diagnose file of thousands of layers is a few MB


def load(spec: str) -> tuple[str, dict]:
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = Path(spec).stem, spec
    p = Path(path)
    if p.exists() and not p.is_file():
        raise DiagnoseError(f"{path}: not a regular file")
    try:
        if p.stat().st_size > MAX_BYTES:
            raise DiagnoseError(f"{path}: {p.stat().st_size} bytes, more than a `vtrain diagnose "
                                f"--out` file holds")
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except OSError as e:
        raise DiagnoseError(f"{path}: {e.strerror}") from None
    except (ValueError, RecursionError) as e:  # bad JSON, bad UTF-8, nested too deeply
        raise DiagnoseError(f"{path}: not JSON ({str(e)[:100] or 'nested too deeply'})") from None
    if not isinstance(d, dict) or not isinstance(d.get("layers"), list) or not d["layers"] \
            or not is_number(d.get("embedding_similarity")):
        raise DiagnoseError(f"{path}: not a `vtrain diagnose --out` file (no layers / "
                            "embedding_similarity)")
    for row in d["layers"]:
        if not isinstance(row, dict) or not isinstance(row.get("layer"), int) \
                or isinstance(row.get("layer"), bool):
            raise DiagnoseError(f"{path}: a layer that is not an object with an integer layer")
        for key in ("similarity", "head_entropy", "uniform_entropy", "v1_share"):
            if key not in row:
                raise DiagnoseError(f"{path}: layer {row.get('layer')} has no {key}")
        ok = (is_number(row["similarity"]) and is_number(row["uniform_entropy"])
              and is_number(row["v1_share"])
              and isinstance(row["head_entropy"], list) and row["head_entropy"]
              and all(is_number(x) for x in row["head_entropy"]))
        if not ok:
            raise DiagnoseError(f"{path}: layer {row['layer']} holds a value that is not a number")
    # null (vtrain writes a non-finite number as null) is drawn as a gap; v1_share's null is
    # "no such term" and stays None.
    d["embedding_similarity"] = as_float(d["embedding_similarity"])
    for row in d["layers"]:
        for key in ("similarity", "uniform_entropy"):
            row[key] = as_float(row[key])
        row["head_entropy"] = [as_float(x) for x in row["head_entropy"]]
    return name, d


def is_number(v) -> bool:
    """A JSON number (or null, a non-finite number as vtrain writes it)."""
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                         and abs(v) < 1e300)


def as_float(v) -> float:
    return float("nan") if v is None else float(v)


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
    if Path(a.out).is_dir():
        print(f"plot_diagnose: error: --out {a.out} is a directory; give the PNG file to write",
              file=sys.stderr)
        return 2
    for name, d in runs:
        sims = " ".join(f"{r['similarity']:.3f}" for r in d["layers"])
        print(f"{name}: similarity emb {d['embedding_similarity']:.3f} | layers {sims}")
    try:
        plot(runs, a.out)
    except OSError as e:
        print(f"plot_diagnose: error: --out {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
