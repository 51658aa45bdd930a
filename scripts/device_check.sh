#!/usr/bin/env bash
# Runs on a GPU machine of the `device` tool (docs/gpu-session.md; scripts/device_bundle.sh makes
# the .device/ bundle this needs; carry it with `carry: [".device"]`). Unpacks the bundle, finds
# the machine's CUDA libraries (cuBLASLt, NCCL: the toolkit's or the pip nvidia-* packages'),
# then runs the stages named on the command line, each under its own time limit (STAGE_LIMIT
# seconds, default 530: a device call may run 10 minutes), writing full logs under $OUT (or
# ./device-logs) and a summary line per stage with its exit code:
#   tests   every GPU test binary (gtest; MPI ones under mpirun at their rank counts, skipped
#           unless the machine has a GPU per rank)
#   cli     tests/gpu/test_gpu_train_cli.py (f32 losses = CPU, bf16 runs whose loss falls,
#           2 ranks on one GPU through MPI staging, a GPU checkpoint resumed on the CPU, d12
#           baseline and bov with tok/s and memory printed)
#   bench   tools/attention_bench (tensor-core vs reference attention, d24/d32 heads), then
#           bench/bench_gpu_vs_torch.py on d12 and d24 (baseline, bov)
# Open MPI runs without ssh/rsh (plm isolated: one node) and without cross-memory attach (CMA
# needs ptrace rights a container may not give).
# Usage: bash scripts/device_check.sh [tests|cli|bench|all ...] (default: tests cli); exit code:
# 0 when every stage passed, else the first failing stage's.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=/tmp/vtrain-root
LOGS=${OUT:-$PWD/device-logs}
LIMIT=${STAGE_LIMIT:-530}
mkdir -p "$LOGS"
if [ ! -x "$ROOT/usr/bin/vtrain" ]; then
  rm -rf /tmp/root && tar -C /tmp -xJf .device/root.tar.xz && mv /tmp/root "$ROOT" || exit 1
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
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
# The tests look for $VTRAIN_BUILD/vtrain: a build directory of links into the bundle (not the
# checkout's build/, which may hold a real build).
B=$ROOT/build
export B ROOT LOGS
mkdir -p "$B/tests"
ln -sf "$ROOT/usr/bin/vtrain" "$B/vtrain"
ln -sf "$ROOT/usr/bin/attention_bench" "$B/attention_bench"
for t in "$ROOT"/tests/*_test; do ln -sf "$t" "$B/tests/$(basename "$t")"; done

{ nvidia-smi -L; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH";
  ldd "$ROOT/usr/bin/vtrain" | grep -E 'not found|cublas|nccl|cudart';
  "$B/vtrain" devices; mpirun -np 2 "$B/vtrain" devices; } > "$LOGS/devices.log" 2>&1
cat "$LOGS/devices.log"

stage_tests() {
  local rc=0 t name
  for t in "$B"/tests/*_test; do
    name=$(basename "$t")
    if [ -f "$ROOT/tests/$name.ranks" ]; then
      for np in $(cat "$ROOT/tests/$name.ranks"); do
        echo "== $name (mpirun -np $np)"
        mpirun -np "$np" "$t" --gtest_color=no || rc=1
      done
    else
      echo "== $name"
      "$t" --gtest_color=no || rc=1
    fi
  done
  return $rc
}
stage_cli() { VTRAIN_BUILD=$B python3 tests/gpu/test_gpu_train_cli.py; }
stage_bench() {
  # Attention kernels first (short): tensor cores vs the reference kernels at d24 and d32 heads.
  "$B/attention_bench" --B 8 --T 2048 --H 12 --Hkv 12 --hd 128 --window 2048,512 \
    --json "$LOGS/attention_d24.json" &&
  "$B/attention_bench" --B 4 --T 2048 --H 16 --Hkv 16 --hd 128 --window 2048,512 \
    --json "$LOGS/attention_d32.json" &&
  python3 bench/bench_gpu_vs_torch.py --presets d12,d24 --modes baseline,bov --seq-len 2048 \
    --micro-batch d12=16,d24=8 --steps 20 --warmup 10 --vtrain "$B/vtrain" --json "$LOGS/bench.json"
}

stages=${*:-tests cli}
[ "$stages" = all ] && stages="tests cli bench"
first_rc=0
for s in $stages; do
  case $s in tests|cli|bench) ;; *) echo "unknown stage $s (tests, cli, bench, all)"; exit 2 ;; esac
  start=$(date +%s)
  # The stage's full output goes to its log; the exit code is the stage's (not tee's).
  timeout --kill-after=10 "$LIMIT" bash -c "$(declare -f stage_$s); stage_$s" > "$LOGS/$s.log" 2>&1
  rc=$?
  [ $rc -eq 124 ] && echo "stage $s: timed out after ${LIMIT}s" >> "$LOGS/$s.log"
  tail -60 "$LOGS/$s.log"
  echo "stage $s: exit $rc in $(( $(date +%s) - start ))s (full log: $LOGS/$s.log)" | tee -a "$LOGS/summary.log"
  [ $first_rc -eq 0 ] && first_rc=$rc
done
exit $first_rc
