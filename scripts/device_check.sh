#!/usr/bin/env bash
# Runs on a GPU machine of the `device` tool (see scripts/device_bundle.sh, which makes the
# .device/ bundle this needs; carry it with `carry: [".device"]`). Unpacks the bundle, finds the
# machine's CUDA libraries (cuBLASLt, NCCL: the toolkit's or the pip nvidia-* packages'), then
# runs, logging everything under $OUT (or ./device-logs):
#   1. vtrain devices
#   2. every GPU test binary (gtest; the training-step tests compare with the CPU backend)
#   3. tests/gpu/test_gpu_train_cli.py (bf16 runs whose loss falls, 2 ranks on one GPU through
#      MPI staging, a GPU checkpoint resumed on the CPU, d12 baseline and bov with tok/s and
#      memory printed)
#   4. with STAGE=bench: bench/bench_gpu_vs_torch.py on d12 and d24 (baseline, bov)
# Usage (device tool): bash scripts/device_check.sh [tests|cli|bench|all] (default: tests cli)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=/tmp/vtrain-root
LOGS=${OUT:-$PWD/device-logs}
mkdir -p "$LOGS"
if [ ! -x "$ROOT/usr/bin/vtrain" ]; then
  mkdir -p /tmp && tar -C /tmp -xJf .device/root.tar.xz && mv /tmp/root "$ROOT" || exit 1
fi
cudalibs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cudalibs+=("$d")
done
site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
for s in $site; do
  for d in "$s"/nvidia/*/lib; do [ -d "$d" ] && cudalibs+=("$d"); done
done
export LD_LIBRARY_PATH="$ROOT/usr/lib/x86_64-linux-gnu:$(IFS=:; echo "${cudalibs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$ROOT/usr" PATH="$ROOT/usr/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mca_base_component_show_load_errors=0
# The tests look for $VTRAIN_BUILD/vtrain: a build directory of links into the bundle (not the
# checkout's build/, which may hold a real build).
B=$ROOT/build
mkdir -p "$B/tests"
ln -sf "$ROOT/usr/bin/vtrain" "$B/vtrain"
ln -sf "$ROOT/usr/bin/memory_plan" "$B/memory_plan"
for t in "$ROOT"/tests/*; do ln -sf "$t" "$B/tests/$(basename "$t")"; done

stages=${*:-tests cli}
[ "$stages" = all ] && stages="tests cli bench"
{ nvidia-smi -L; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ldd "$ROOT/usr/bin/vtrain" | grep -E 'not found|cublas|nccl|cudart'; "$B/vtrain" devices; } 2>&1 | tee "$LOGS/devices.log"
rc=0
for s in $stages; do
  case $s in
    tests)
      for t in "$B"/tests/*_test; do
        echo "== $(basename "$t")"
        timeout 900 "$t" --gtest_color=no 2>&1 | tail -40 || rc=1
      done 2>&1 | tee "$LOGS/gpu_tests.log" ;;
    cli)
      VTRAIN_BUILD=$B timeout 1500 python3 tests/gpu/test_gpu_train_cli.py 2>&1 \
        | tee "$LOGS/gpu_cli.log" || rc=1 ;;
    bench)
      timeout 1500 python3 bench/bench_gpu_vs_torch.py --presets d12,d24 --modes baseline,bov \
        --seq-len 2048 --micro-batch d12=16,d24=8 --steps 20 --warmup 10 --vtrain "$B/vtrain" \
        --json "$LOGS/bench.json" 2>&1 | tee "$LOGS/bench.log" || rc=1 ;;
    *) echo "unknown stage $s (tests, cli, bench, all)"; exit 2 ;;
  esac
done
exit $rc
