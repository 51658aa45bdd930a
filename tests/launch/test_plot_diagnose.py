"""launch/plot_diagnose.py: draws a PNG from `vtrain diagnose --out` files (written here in that
format), labels runs NAME=FILE or by stem, and refuses files that are not diagnoses, duplicate
labels and missing files with a message naming them."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
SCRIPT = ROOT / "launch" / "plot_diagnose.py"


def diag(path, sims, share):
    layers = [{"layer": i, "window": 8, "similarity": s, "head_entropy": [1.0, 1.2],
               "entropy_mean": 1.1, "uniform_entropy": 1.9, "importance_entropy": 3.0,
               "v1_share": share if i > 0 else None} for i, s in enumerate(sims)]
    path.write_text(json.dumps({"value_mode": "x", "sequences": 2, "seq_len": 32, "tokens": 64,
                                "embedding_similarity": 0.1, "layers": layers}))
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_plots_several_runs(tmp_path):
    a = diag(tmp_path / "base.json", [0.2, 0.4, 0.6], None)
    b = diag(tmp_path / "b.json", [0.2, 0.3, 0.35], 0.5)
    r = run(a, f"bov={b}", "--out", tmp_path / "d.png")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "base: similarity emb 0.100 | layers 0.200 0.400 0.600" in r.stdout
    assert "bov: similarity" in r.stdout


def test_refusals(tmp_path):
    a = diag(tmp_path / "a.json", [0.2, 0.4], 0.5)
    r = run(a, a, "--out", tmp_path / "d.png")
    assert r.returncode == 2 and "labelled alike" in r.stderr
    (tmp_path / "m.jsonl").write_text('{"step": 1, "loss": 3.0}\n')
    r = run(tmp_path / "m.jsonl", "--out", tmp_path / "d.png")
    assert r.returncode == 2 and "m.jsonl" in r.stderr
    r = run(tmp_path / "nope.json", "--out", tmp_path / "d.png")
    assert r.returncode == 2 and "nope.json" in r.stderr
    assert not (tmp_path / "d.png").exists()
