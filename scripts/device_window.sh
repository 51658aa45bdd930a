#!/usr/bin/env bash
# The GPU window: everything vtrain asks of a lent GPU machine, in one call of the `device` tool
# (docs/gpu-session.md). Unpacks the bundle scripts/device_bundle.sh made (.device/root.tar.gz,
# carried along), writes wrappers that give the bundle's programs, and only them, its libraries
# and Open MPI's relocation, then runs the stages in order of value under one global deadline,
# each with a limit of its own (and every test binary with its own), so that the most valuable
# numbers exist even if a later stage hangs or dies:
#   facts       GPU, driver, OS, glibc and libstdc++ against what the bundle needs, the libraries
#               that resolve, torch, `vtrain devices` and `mpirun -np 2 vtrain devices`
#   attention   tools/attention_bench at d24's shape: tensor-core vs reference kernels, TFLOP/s
#               and the largest difference between them
#   train       d24 baseline, bf16, micro-batch 16 x 2048, 20 steps on synthetic (Markov) data:
#               tok/s, MFU, peak memory, loss falling; --profile timed by device events
#   tests       every GPU test binary (MPI ones at their rank counts), 60 s each
#   gemm        tools/gemm_bench --fp8 (vtrain's cuBLASLt GEMM at d24's fwd/dx/dW shapes, and the
#               FP8 GEMMs of --fp8 e4m3 with their quantization) beside
#               bench/gemm_torch.py (torch's bf16 matmul, same shapes)
#   torch_peer  bench/bench_gpu_vs_torch.py's PyTorch side at d24 baseline (the vtrain side is
#               the train stage's run, same shape)
#   graphs      d24 baseline at train's shape without --profile (CUDA graphs refuse it), once per
#               --cuda-graphs mode: off, micro-step, step (issue 37: the host time graphs remove)
#   fp8         d24 baseline as train under --fp8 e4m3 (issue 44: the FP8 step beside bf16's)
#   bov         d24 bov at micro-batch 8, as train
#   cli         tests/gpu/test_gpu_train_cli.py, every case (no -x), whatever the deadline leaves
# Each stage survives the failure of the ones before it. Out: $OUT/summary.txt (also printed
# last), $OUT/numbers.json (scripts/window_numbers.py; format in docs/gpu-session.md) and
# $OUT/logs.tar.gz (every log): three files of the eight a call may return.
#
# On the CUDA emulation (an emulated bundle, VTRAIN_BUNDLE_EMULATED=1) the same stages run at
# tiny shapes, test binaries run their first test only, and the summary says EMULATED: CI's
# rehearsal (tests/launch/test_device_window.py), so this script cannot rot unseen.
#
# Usage: bash scripts/device_window.sh
#   env: OUT (default ./window-out), WINDOW_BUNDLE (.device/root.tar.gz or .tar.xz), WINDOW_DEADLINE
#   (540 s), WINDOW_STAGES (comma list, default all), WINDOW_PYTHON (python3), WINDOW_WORK
#   (/tmp/vtrain-window), WINDOW_TEST_LIMIT (60 s per test binary), WINDOW_TEST_LIMITS
#   ("binary=seconds,...": other limits for some test binaries), WINDOW_LIMITS ("stage=seconds,...":
#   other stage limits than the defaults below)
# Exit: 0 when every stage that ran is ok or skipped, 1 when one failed or timed out, 2 when the
# bundle cannot be used at all (the summary still comes out).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
START=$(date +%s)
DEADLINE=${WINDOW_DEADLINE:-540}
OUTDIR=${OUT:-$REPO/window-out}
BUNDLE=${WINDOW_BUNDLE:-}
if [ -z "$BUNDLE" ]; then
  BUNDLE=$REPO/.device/root.tar.gz
  [ -f "$BUNDLE" ] || BUNDLE=$REPO/.device/root.tar.xz
fi
WORK=${WINDOW_WORK:-/tmp/vtrain-window}
PY=${WINDOW_PYTHON:-python3}
TEST_LIMIT=${WINDOW_TEST_LIMIT:-60}
STAGES=${WINDOW_STAGES:-facts,attention,train,tests,gemm,torch_peer,graphs,fp8,bov,cli}
RESERVE=15  # seconds kept for the summary and the packing
ROOT=$WORK/root
B=$WORK/bin        # wrappers: vtrain, mpirun, attention_bench, gemm_bench, tests/<binary>
LOGS=$WORK/logs
NUM=$WORK/numbers
# WORK is the window's own: emptied only when an earlier window made it (its marker file).
if [ -d "$WORK" ] && [ -n "$(ls -A "$WORK")" ] && [ ! -f "$WORK/.vtrain-window" ]; then
  echo "device_window: WINDOW_WORK=$WORK exists and was not made by a window; name another" >&2
  exit 2
fi
rm -rf "$WORK"
mkdir -p "$OUTDIR" "$LOGS" "$NUM" "$B/tests"
touch "$WORK/.vtrain-window"
: > "$WORK/stages.tsv"

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( DEADLINE - $(elapsed) - RESERVE )); }

finish() {
  # numbers.json and the summary; if python itself is broken, the stage table as the summary.
  if ! "$PY" scripts/window_numbers.py merge "$WORK" "$OUTDIR/numbers.json" "$OUTDIR/summary.txt" \
       > "$LOGS/merge.log" 2>&1; then
    { echo "window_numbers.py merge failed (logs/merge.log); stages:"; cat "$WORK/stages.tsv"; } \
      > "$OUTDIR/summary.txt"
  fi
  cp "$OUTDIR/summary.txt" "$LOGS/"
  tar -C "$WORK" -czf "$OUTDIR/logs.tar.gz" logs numbers meta.kv stages.tsv 2>/dev/null
  echo
  echo "===== summary ($OUTDIR/summary.txt; numbers.json, logs.tar.gz beside it) ====="
  cat "$OUTDIR/summary.txt"
  exit "$1"
}

# --- the bundle ---------------------------------------------------------------------------------
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "deadline=$DEADLINE"
  echo "commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$WORK/meta.kv"
unpack() {
  [ -f "$BUNDLE" ] || { echo "no bundle at $BUNDLE (make it with scripts/device_bundle.sh and carry .device)"; return 1; }
  # tar with gzip or xz where they are; python's tarfile (gzip and xz alike) where they are not.
  local z=z
  case $BUNDLE in *.xz) z=J; command -v xz > /dev/null || z="" ;; esac
  { [ -n "$z" ] && tar -C "$WORK" -x${z}f "$BUNDLE"; } ||
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE" "$WORK"
}
if ! unpack > "$LOGS/unpack.log" 2>&1 || [ ! -f "$ROOT/MANIFEST" ]; then
  cat "$LOGS/unpack.log"
  echo "emulated=0" >> "$WORK/meta.kv"
  echo "device=unknown (bundle unusable)" >> "$WORK/meta.kv"
  printf 'unpack\tfailed\t2\t%s\n' "$(elapsed)" >> "$WORK/stages.tsv"
  finish 2
fi
EMU=$(awk '$1 == "emulated" {print $2}' "$ROOT/MANIFEST")
echo "emulated=$EMU" >> "$WORK/meta.kv"
# What ran is the bundle's commit (the device's copy of the checkout may carry an older .git).
bcommit=$(awk '$1 == "commit" {print $2}' "$ROOT/MANIFEST")
[ -n "$bcommit" ] && sed -i "s/^commit=.*/commit=$bcommit/" "$WORK/meta.kv"
# The GPU's name for the summary's first line, also when the facts stage does not run.
if [ "$EMU" != 1 ] && command -v nvidia-smi > /dev/null; then
  echo "gpu=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
    >> "$WORK/meta.kv"
fi

# The machine's CUDA libraries: the toolkit's, else pip's nvidia-* packages'.
cudalibs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cudalibs+=("$d")
done
for s in $("$PY" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for d in "$s"/nvidia/*/lib; do [ -d "$d" ] && cudalibs+=("$d"); done
done
LIBPATH="$ROOT/usr/lib/x86_64-linux-gnu$(printf ':%s' "${cudalibs[@]}")"
# A wrapper per bundle program: the library path, Open MPI relocated into the bundle (with
# Debian's defaults from its etc/openmpi), no ssh (plm isolated: one node), no cross-memory attach
# (containers may forbid ptrace). Nothing of this reaches python3, torch or other programs.
wrap() {  # wrap NAME TARGET
  cat > "$B/$1" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$LIBPATH"
export OPAL_PREFIX="$ROOT/usr" OPAL_SYSCONFDIR="$ROOT/etc/openmpi"
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$2" "\$@"
EOF
  chmod +x "$B/$1"
}
for p in vtrain attention_bench gemm_bench mpirun; do wrap "$p" "$ROOT/usr/bin/$p"; done
for t in "$ROOT"/tests/*_test; do wrap "tests/$(basename "$t")" "$t"; done
export B ROOT LOGS NUM PY EMU REPO TEST_LIMIT WORK
if [ "$EMU" = 1 ]; then
  # Tiny shapes on the emulation; one emulated device per rank for the MPI tests; --device cuda
  # allowed on the emulation (vtrain refuses it there otherwise; `vtrain devices` exits 4).
  export VT_EMU_DEVICES=2 OMP_NUM_THREADS=1 VTRAIN_ALLOW_EMULATED_CUDA=1
  echo "device=CUDA emulation (cuda_emu/, on the CPU)" >> "$WORK/meta.kv"
fi

# --- stages -------------------------------------------------------------------------------------
stage_facts() {
  local f=$NUM/facts.kv
  : > "$f"
  if command -v nvidia-smi > /dev/null; then
    timeout 20 nvidia-smi -L
    echo "gpu=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" >> "$f"
    echo "driver=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)" >> "$f"
    echo "gpu_memory=$(timeout 20 nvidia-smi --query-gpu=memory.total --format=csv,noheader | head -1)" >> "$f"
  else
    echo "gpu=none (no nvidia-smi)" >> "$f"
  fi
  echo "kernel=$(uname -r)" >> "$f"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")" >> "$f"
  local glibc need_c need_cxx cxxlib cxxmax abi=ok
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  need_c=$(awk '$1 == "needs_glibc" {print $2}' "$ROOT/MANIFEST")
  need_cxx=$(awk '$1 == "needs_glibcxx" {print $2}' "$ROOT/MANIFEST")
  cxxlib=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  cxxmax=$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "${cxxlib:-/nonexistent}" 2>/dev/null | sort -uV | tail -1)
  # version_ok NEED HAVE: HAVE is at least NEED (an empty HAVE is not).
  version_ok() { [ -n "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }
  version_ok "$need_c" "$glibc" || abi="glibc $glibc is older than the bundle's $need_c"
  if ! version_ok "$need_cxx" "$cxxmax"; then
    [ "$abi" = ok ] && abi="" || abi="$abi; "
    abi="${abi}libstdc++ offers ${cxxmax:-nothing}, the bundle needs $need_cxx"
  fi
  printf 'glibc=%s\nbundle_needs_glibc=%s\nglibcxx_max=%s\nbundle_needs_glibcxx=%s\nlibstdcxx=%s\nabi_ok=%s\n' \
    "$glibc" "$need_c" "$cxxmax" "$need_cxx" "$cxxlib" "$abi" >> "$f"
  # Which libraries resolve for each bundle program (under its wrapper's path).
  local missing=""
  for p in "$ROOT"/usr/bin/vtrain "$ROOT"/usr/bin/attention_bench "$ROOT"/usr/bin/gemm_bench \
           "$ROOT"/usr/bin/orterun "$ROOT"/tests/*_test; do
    local nf
    nf=$(LD_LIBRARY_PATH="$(sed -n 's/^export LD_LIBRARY_PATH="\(.*\)"$/\1/p' "$B/vtrain")" \
         timeout 20 ldd "$p" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    echo "ldd $(basename "$p"): ${nf:-all resolve}"
    [ -n "$nf" ] && missing="$missing $(basename "$p"):[${nf% }]"
  done
  echo "libs_ok=${missing:-yes}" >> "$f"
  local tv
  tv=$(timeout 90 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>/dev/null)
  echo "torch=${tv:-absent}" >> "$f"
  local rc=0 s
  # `vtrain devices` exits 0 with a GPU, 4 when the only devices are the CUDA emulation: what an
  # emulated bundle must show (and a GPU machine must not).
  local want=0
  [ "$EMU" = 1 ] && want=4
  echo "== vtrain devices"
  timeout -k 5 30 "$B/vtrain" devices > "$LOGS/devices.txt" 2>&1
  s=$?
  if [ $s -eq $want ]; then
    echo "devices=ok" >> "$f"
  else
    echo "devices=exit $s" >> "$f"; rc=1
  fi
  cat "$LOGS/devices.txt"
  echo "== mpirun -np 2 vtrain devices"
  timeout -k 5 45 "$B/mpirun" -np 2 "$B/vtrain" devices
  s=$?
  # mpirun exits with the first failing rank's code (Open MPI 4.1: 4 on the emulation).
  if [ $s -eq $want ]; then
    echo "mpirun_devices=ok" >> "$f"
  else
    echo "mpirun_devices=exit $s" >> "$f"; rc=1
  fi
  cat "$f"
  [ "$abi" = ok ] || rc=1
  return $rc
}

stage_attention() {
  local shape=(--B 16 --T 2048 --H 12 --Hkv 12 --hd 128 --window 2048,512)
  [ "$EMU" = 1 ] && shape=(--B 1 --T 64 --H 2 --Hkv 2 --hd 32 --window 64,16 --iters 1 --warmup 1)
  "$B/attention_bench" "${shape[@]}" --json "$NUM/attention.json"
}

# Synthetic Markov data (learnable: the loss must fall), made once for train, torch_peer and bov.
make_data() {
  [ -f "$WORK/data/meta.json" ] && return 0
  local vocab=32768 ntrain=2000000  # the stages read about 1M tokens; the loader wraps
  [ "$EMU" = 1 ] && vocab=512 ntrain=200000
  (cd "$REPO/bench" && "$PY" -c "
import sys; from synthetic_data import make_data_dir
make_data_dir(sys.argv[1], sys.argv[2], $vocab, $ntrain, 200000, kind='markov', seed=1)" \
    "$B/vtrain" "$WORK/data")
}

# train_run NAME VALUE MICRO_BATCH: one run of `vtrain train` on the device, then its fragment.
train_run() {
  local name=$1 value=$2 mb=$3 preset=d24 seq=2048 steps=20
  [ "$EMU" = 1 ] && preset=tiny seq=64 mb=2 steps=20
  make_data || return 1
  local gb=$(( mb * seq ))
  rm -f "$WORK/$name.jsonl"
  "$B/vtrain" train --data "$WORK/data" --preset "$preset" --value "$value" --seq-len "$seq" \
    --micro-batch "$mb" --global-batch "$gb" --steps "$steps" --warmup 2 --device cuda \
    --final-eval-tokens 0 --metrics "$WORK/$name.jsonl" ${WINDOW_PROFILE---profile} \
    ${WINDOW_EXTRA:-} 2>&1 |
    tee "$LOGS/$name.out"
  local rc=${PIPESTATUS[0]}
  "$PY" "$REPO/scripts/window_numbers.py" train "$WORK/$name.jsonl" "$LOGS/$name.out" \
    "$NUM/$name.json" --preset "$preset" --value "$value" --mb "$mb" --seq "$seq" || rc=1
  return $rc
}
stage_train() { train_run train baseline 16; }
stage_bov() { train_run bov bov 8; }
# fp8: the train stage's run with the linear layers' GEMMs in FP8 (--fp8 e4m3), profiled the same
# way; the summary line gives its tok/s against train's (bench/step_model.py's FP8 line predicts it).
stage_fp8() { WINDOW_EXTRA="--fp8 e4m3" train_run fp8 baseline 16; }
# graphs: the train stage's run without --profile (graphs refuse it, and its events add host time
# of their own), once per --cuda-graphs mode; numbers/graphs.json holds the three fragments. The
# summary line compares their tok/s (bench/step_model.py predicts the host gaps each leaves).
stage_graphs() {
  local rc=0 g
  for g in off micro-step step; do
    WINDOW_PROFILE= WINDOW_EXTRA="--cuda-graphs $g" train_run "graphs_$g" baseline 16 > /dev/null ||
      rc=1
  done
  "$PY" - "$NUM" <<'PY' || rc=1
import json, os, sys
out = {}
for g in ("off", "micro-step", "step"):
    try:
        out[g] = json.load(open(os.path.join(sys.argv[1], f"graphs_{g}.json")))
    except (OSError, ValueError):
        pass
json.dump(out, open(os.path.join(sys.argv[1], "graphs.json"), "w"), indent=1)
for g, r in out.items():
    print(f"--cuda-graphs {g:10s} {r.get('tok_per_s', 0):>10,.0f} tok/s  MFU {100 * r.get('mfu', 0):5.1f}%")
PY
  return $rc
}
# modes (not in the default list): d24 at micro-batch 8 for each value mode in WINDOW_MODES, then
# each block shape in WINDOW_BLOCKS (with the baseline value path), as train; a run each, so
# that one mode's failure costs only its own row.
stage_modes() {
  local rc=0 v
  for v in ${WINDOW_MODES//,/ }; do train_run "mode_$v" "$v" 8 > /dev/null || rc=1; done
  for v in ${WINDOW_BLOCKS//,/ }; do
    WINDOW_EXTRA="--block $v" train_run "block_$v" baseline 8 > /dev/null || rc=1
  done
  "$PY" - "$NUM" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "mode_*.json")) +
                sorted(glob.glob(os.path.join(sys.argv[1], "block_*.json")))):
    r = json.load(open(f))
    print(f"{os.path.basename(f)[:-5]:24s} {r.get('tok_per_s', 0):>10,.0f} tok/s  MFU "
          f"{100 * r.get('mfu', 0):5.1f}%  peak {r.get('peak_device_bytes', 0) / 2**30:6.1f} GiB  "
          f"loss {r.get('loss_first', 0):.3f} -> {r.get('loss_last', 0):.3f}")
PY
  return $rc
}

stage_tests() {
  local rc=0 t name rep=$LOGS/tests
  mkdir -p "$rep"
  for t in "$B"/tests/*_test; do
    name=$(basename "$t")
    local filter=()
    if [ "$EMU" = 1 ]; then
      # The rehearsal: each binary's first test (the binary, its wrapper and the report path run).
      local first
      first=$(timeout 30 "$t" --gtest_list_tests 2>/dev/null | awk '/^[^ ]/ {s=$1} /^  / {print s $1; exit}')
      [ -n "$first" ] && filter=(--gtest_filter="$first")
    fi
    local cmd=("$t")
    if [ -f "$ROOT/tests/$name.ranks" ]; then
      cmd=("$B/mpirun" -np "$(awk '{print $1}' "$ROOT/tests/$name.ranks")" "$t")
    fi
    echo "== $name ${filter[*]}"
    local lim=$TEST_LIMIT s o
    for o in ${WINDOW_TEST_LIMITS//,/ }; do [ "${o%%=*}" = "$name" ] && lim=${o#*=}; done
    timeout -k 5 "$lim" "${cmd[@]}" --gtest_color=no "${filter[@]}" \
      --gtest_output="json:$rep/$name.json" > "$rep/$name.log" 2>&1
    s=$?
    tail -5 "$rep/$name.log"
    case $s in
      0) echo ok > "$rep/$name.status" ;;
      124|137) echo timeout > "$rep/$name.status"; rc=1 ;;
      *) echo failed > "$rep/$name.status"; rc=1 ;;
    esac
  done
  "$PY" "$REPO/scripts/window_numbers.py" tests "$rep" "$NUM/tests.json"
  return $rc
}

stage_gemm() {
  local shape=(--dim 1536 --tokens 32768 --vocab 32768)
  [ "$EMU" = 1 ] && shape=(--dim 64 --tokens 64 --vocab 128 --iters 1 --warmup 0)
  "$B/gemm_bench" "${shape[@]}" --fp8 --json "$NUM/gemm.json" || return 1
  "$PY" "$REPO/bench/gemm_torch.py" "$NUM/gemm.json"
  local s=$?
  [ $s -eq 77 ] && return 0  # no torch or no device for it: vtrain's side stands alone
  return $s
}

stage_torch_peer() {
  if ! timeout 90 "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "no torch with CUDA here: the PyTorch peer is not measured"
    echo '{"note": "not measured: no torch with CUDA"}' > "$NUM/torch_peer.json"
    return 77
  fi
  make_data || return 1
  "$PY" "$REPO/bench/bench_gpu_vs_torch.py" --only torch --presets d24 --modes baseline \
    --seq-len 2048 --micro-batch 16 --steps 20 --warmup 10 --data "$WORK/data" \
    --vtrain "$B/vtrain" --json "$NUM/torch_peer.json"
}

stage_cli() {
  local k=()
  # The rehearsal runs one case: the mechanism, not the suite (CI runs the suite itself).
  [ "$EMU" = 1 ] && k=(-k "test_tiny_bf16_loss_falls and baseline")
  VTRAIN_BUILD=$B PATH="$B:$PATH" "$PY" "$REPO/tests/gpu/test_gpu_train_cli.py" \
    --junitxml="$LOGS/cli.xml" "${k[@]}"
  local s=$?
  "$PY" "$REPO/scripts/window_numbers.py" cli "$LOGS/cli.xml" "$NUM/cli.json"
  return $s
}
export -f stage_facts stage_attention make_data train_run stage_train stage_bov stage_graphs \
  stage_fp8 \
  stage_modes \
  stage_tests \
  stage_gemm stage_torch_peer stage_cli

# --- the run ------------------------------------------------------------------------------------
declare -A LIMIT=([facts]=150 [attention]=90 [train]=150 [tests]=240 [gemm]=60 [torch_peer]=180
                  [graphs]=240 [fp8]=150 [bov]=120 [cli]=600 [modes]=600)
# WINDOW_LIMITS="stage=seconds,...": other limits (the global deadline still bounds each).
IFS=, read -r -a overrides <<< "${WINDOW_LIMITS:-}"
for o in "${overrides[@]}"; do
  k=${o%%=*} v=${o#*=}
  [ -n "${LIMIT[$k]:-}" ] && [[ "$v" =~ ^[0-9]+$ ]] ||
    { echo "WINDOW_LIMITS: '$o' is not STAGE=SECONDS with a known stage (${!LIMIT[*]})"; exit 2; }
  LIMIT[$k]=$v
done
IFS=, read -r -a overrides <<< "${WINDOW_TEST_LIMITS:-}"
for o in "${overrides[@]}"; do
  [[ "$o" =~ ^[A-Za-z0-9_]+=[0-9]+$ ]] ||
    { echo "WINDOW_TEST_LIMITS: '$o' is not BINARY=SECONDS (e.g. rope_test=30)"; exit 2; }
done
export WINDOW_TEST_LIMITS=${WINDOW_TEST_LIMITS:-}
worst=0
IFS=, read -r -a todo <<< "$STAGES"
for s in "${todo[@]}"; do
  [ -n "${LIMIT[$s]:-}" ] || { echo "unknown stage $s (known: ${!LIMIT[*]})"; exit 2; }
done
for s in "${todo[@]}"; do
  t0=$(date +%s)
  lim=${LIMIT[$s]}
  l=$(left)
  (( l < lim )) && lim=$l
  if (( l < 10 )); then
    printf '%s\tskipped\t0\t0\n' "$s" >> "$WORK/stages.tsv"
    echo "stage $s: skipped (the deadline leaves ${l}s)"
    continue
  fi
  echo "===== stage $s (limit ${lim}s, $(elapsed)s elapsed)"
  timeout -k 5 "$lim" bash -c "stage_$s" > "$LOGS/$s.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status=timeout; echo "stage $s: timed out after ${lim}s" >> "$LOGS/$s.log" ;;
    *) status=failed ;;
  esac
  tail -15 "$LOGS/$s.log"
  printf '%s\t%s\t%s\t%s\n' "$s" "$status" "$rc" "$(( $(date +%s) - t0 ))" >> "$WORK/stages.tsv"
  echo "stage $s: $status (exit $rc) in $(( $(date +%s) - t0 ))s"
  [ "$status" = failed ] || [ "$status" = timeout ] && worst=1
done
finish $worst
