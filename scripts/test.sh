#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd build
ctest --output-on-failure -j "${CTEST_JOBS:-2}" "$@"
