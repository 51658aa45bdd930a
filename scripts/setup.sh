#!/usr/bin/env bash
# Installs what vtrain needs on a fresh Debian machine, idempotently: the Debian packages of
# docs/design.md "Conventions" and a Python venv (.venv) used only by tests and tools. Safe to run
# repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake pkg-config git
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
  libabsl-dev libgtest-dev libopenblas-dev libopenblas0-openmp libpcre2-dev nlohmann-json3-dev
  zlib1g-dev libzstd-dev zstd libsnappy-dev libprotobuf-dev protobuf-compiler libtomlplusplus-dev
  bible-kjv python3-venv
  slurmctld slurmd slurm-client munge iproute2 util-linux   # tests/cluster
  clang libclang-rt-14-dev libomp-dev)                      # tests/fuzz (libFuzzer)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python venv for the reference tests and tools (never used by training itself).
PY_REQS=scripts/requirements.txt
stamp=.venv/.vtrain-reqs
if [ ! -x .venv/bin/python ] || ! cmp -s "$PY_REQS" "$stamp"; then
  echo "[setup] creating Python venv .venv"
  PY=python3
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$PY_REQS"
  cp "$PY_REQS" "$stamp"
fi
echo "[setup] ok"
