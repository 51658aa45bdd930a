#!/usr/bin/env bash
# scripts/corpus_pydoc.sh owns the second ablation corpus (issue 43 item 6; docs/results.md
# "Second corpus"): the text of Debian's python3.11-doc (the Python 3.11 documentation, 530
# Sphinx HTML pages, PSF licence), extracted with tools/html_text.py (about 10.4 MB, 1.47M words of
# English technical prose with code samples) and prepared exactly as the KJV was
# (bpe:4096, 2% validation). Needs apt (for `apt-get download`, no install), dpkg-deb, the venv
# and a built vtrain. OUT (default data/pydoc) and RAW (default data/raw/pydoc) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/pydoc}
RAW=${RAW:-data/raw/pydoc}
mkdir -p "$RAW"
if ! ls "$RAW"/python3.11-doc_*_all.deb >/dev/null 2>&1; then
  (cd "$RAW" && apt-get download python3.11-doc)
fi
rm -rf "$RAW/pkg"
dpkg-deb -x "$RAW"/python3.11-doc_*_all.deb "$RAW/pkg"
echo "[corpus] $(ls "$RAW"/python3.11-doc_*_all.deb)"
.venv/bin/python tools/html_text.py "$RAW/pkg/usr/share/doc/python3.11/html" > "$RAW/pydoc.txt"
echo "[corpus] $(wc -c < "$RAW/pydoc.txt") bytes, sha256 $(sha256sum "$RAW/pydoc.txt" | cut -d' ' -f1)"
build/vtrain prepare --input "$RAW/pydoc.txt" --out "$OUT" --tokenizer bpe:4096 --val-fraction 0.02
