"""Shared by the MPI-group tests: a small data directory prepared from Debian's bible-kjv with
vtrain's own `prepare` (byte-level BPE of 300 tokens)."""
import os
import subprocess

BUILD = os.environ.get("VTRAIN_BUILD", "build")
VTRAIN = os.path.join(BUILD, "vtrain")


def prepare_bible(root, verses="Gen1:1-Gen10:32", *extra):
    """root/data from the verses (the `bible` command's range syntax); returns its path."""
    text = subprocess.run(["bible", verses], capture_output=True, text=True).stdout
    (root / "c.txt").write_text(text)
    r = subprocess.run([VTRAIN, "prepare", "--input", str(root / "c.txt"), "--out",
                        str(root / "data"), "--tokenizer", "bpe:300", "--quiet", *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return root / "data"
