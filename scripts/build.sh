#!/usr/bin/env bash
# Configures and builds vtrain (Release) into build/. Incremental on repeated runs.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DVTRAIN_PYTHON="$PWD/.venv/bin/python" >/dev/null
cmake --build build -j "$JOBS"
