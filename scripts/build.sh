#!/usr/bin/env bash
# Configures and builds vtrain (Release) into build/. Incremental on repeated runs.
#
#   bash scripts/build.sh            # everything: vtrain, the tools, every test binary
#   bash scripts/build.sh vtrain     # only the targets named (launch/demo.sh builds vtrain)
#
# cmake prints a line per compiled file with the percentage done. ccache is used for the C, C++
# and CUDA compilers when it is installed (VTRAIN_CCACHE=0: not): a fresh build/ (another clone
# or worktree under the same ccache base_dir, `rm -rf build`, a branch switched back and forth)
# then compiles only what changed (docs/status.md "The demo" has the times measured). JOBS sets
# the parallel jobs (default: the CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
launcher=()
if [ "${VTRAIN_CCACHE:-1}" != 0 ] && command -v ccache > /dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
elif [ "${VTRAIN_CCACHE:-1}" = 0 ]; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=
            -DCMAKE_CUDA_COMPILER_LAUNCHER=)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DVTRAIN_PYTHON="$PWD/.venv/bin/python" \
  "${launcher[@]}" > /dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$JOBS" "${targets[@]}"
