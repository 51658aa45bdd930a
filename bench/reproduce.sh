#!/usr/bin/env bash
# bench/reproduce.sh: every measured figure of docs/status.md and bench/README.md, produced again
# on this machine from this checkout, in one run. Prints (and writes to $OUT/report.md) a header
# with the date, commit and machine, then the output of each benchmark as those pages quote it:
#   1. CPU training step against JAX (bench_cpu_vs_jax.py): tiny preset, T256, micro-batch 8,
#      both cores, then single-threaded; and a development shape (L4, d512, hd128, T512,
#      micro-batch 4) with the machine's SGEMM rate beside it (bench_cpu_vs_jax.py --sgemm), and
#      d512 / d768 at T1024, micro-batch 2
#   2. tokenizer: BPE training against Hugging Face tokenizers, encoding against tiktoken,
#      `vtrain prepare` and the core-hours for 200B tokens (bench_tokenizer.py)
#   3. checkpoint save against dd, synchronous against asynchronous pause (bench_checkpoint.py)
#   4. every dp x tp x pp layout against one process (bench_layouts.py)
#   5. the memory estimates of bench/README.md (vtrain plan --layout --memory-only)
#   6. the static H100 report of a d24/d32 step (static_report.py; needs the nvcc build)
#   7. the PyTorch peer against the JAX reference and vtrain (check_torch_model.py): needs
#      torch, installed from PyPI into .venv-torch on first use (about 5.4 GiB with the CUDA
#      libraries PyPI's torch wheel pulls in; TORCH_PYTHON=path uses another python with torch)
# From a clean clone: `bash bench/reproduce.sh` installs and builds first (scripts/setup.sh,
# scripts/build.sh, both idempotent). Takes about 20 minutes on 2 cores. Knobs: OUT (default
# runs/reproduce-DATE), ONLY="1 3" (a subset of the numbered parts), SKIP_SETUP=1.
# Timings move with the machine's load: the header records the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh >/dev/null
  bash scripts/build.sh >/dev/null
fi
OUT=${OUT:-runs/reproduce-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
REPORT=$OUT/report.md
PY=.venv/bin/python
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
say() { echo "$*" | tee -a "$REPORT"; }
section() { say ""; say "## $*"; say ""; }
# Runs a command, its output into the report, and its wall time after it.
record() {
  local t0=$SECONDS
  say '```'
  say "\$ $*"
  "$@" 2>&1 | tee -a "$REPORT"
  say '```'
  say "($((SECONDS - t0)) s)"
}

: >"$REPORT"
say "# vtrain benchmarks, reproduced"
say ""
say "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
say "- commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
say "- machine: $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -sr)"
say "- $(./build/vtrain devices 2>/dev/null | grep -i "^ *blas" | head -1 | sed 's/^ *//')"
say "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

DATA=$OUT/kjv
if [ ! -f "$DATA/meta.json" ]; then
  bible Gen1:1-Rev22:21 >"$OUT/kjv.txt"
  ./build/vtrain prepare --input "$OUT/kjv.txt" --out "$DATA" --tokenizer bpe:4096 --quiet
fi

if want 1; then
  section "1. CPU training step against JAX (bench/bench_cpu_vs_jax.py)"
  record $PY bench/bench_cpu_vs_jax.py --data "$DATA" --modes baseline,bov --json "$OUT/cpu_vs_jax.json"
  record $PY bench/bench_cpu_vs_jax.py --data "$DATA" --modes baseline,bov --threads 1 \
    --json "$OUT/cpu_vs_jax_1thread.json"
  record $PY bench/bench_cpu_vs_jax.py --data "$DATA" --modes baseline --layers 4 --dim 512 \
    --heads 4 --kv-heads 4 --seq-len 512 --micro-batch 4 --steps 10 --warmup 3 --sgemm \
    --json "$OUT/cpu_vs_jax_d512.json"
  record $PY bench/bench_cpu_vs_jax.py --data "$DATA" --modes baseline --layers 4 --dim 512 \
    --heads 4 --kv-heads 4 --seq-len 1024 --micro-batch 2 --steps 8 --warmup 2 --sgemm \
    --json "$OUT/cpu_vs_jax_d512_t1024.json"
  record $PY bench/bench_cpu_vs_jax.py --data "$DATA" --modes baseline --layers 4 --dim 768 \
    --heads 6 --kv-heads 6 --seq-len 1024 --micro-batch 2 --steps 8 --warmup 2 --sgemm \
    --json "$OUT/cpu_vs_jax_d768_t1024.json"
fi
if want 2; then
  section "2. Tokenizer (bench/bench_tokenizer.py)"
  record $PY bench/bench_tokenizer.py --mb 24 --vocab 8192 --repeats 3 --json "$OUT/tokenizer.json"
fi
if want 3; then
  section "3. Checkpoints (bench/bench_checkpoint.py)"
  record $PY bench/bench_checkpoint.py --dir "$OUT"
fi
if want 4; then
  section "4. Layouts (bench/bench_layouts.py)"
  record $PY bench/bench_layouts.py --data "$DATA"
fi
if want 5; then
  section "5. Memory estimates (vtrain plan --layout --memory-only)"
  mem="--seq-len 2048 --layout 1,1,1 --micro-batch 16 --memory-only"
  record ./build/vtrain plan --preset d24 $mem --value baseline
  record ./build/vtrain plan --preset d24 $mem --value bov
  record ./build/vtrain plan --preset d24 $mem --value bov --recompute on
  record ./build/vtrain plan --preset d12 $mem --value bov
fi
if want 6; then
  section "6. Static H100 report (bench/static_report.py)"
  if ls build/CMakeFiles/vtrain_kernels_sm90.dir/kernels/*.ptxas.txt >/dev/null 2>&1; then
    record $PY bench/static_report.py --markdown
  else
    say "skipped: no nvcc build with ptxas reports in build/ (CUDA toolkit not found at configure)"
  fi
fi
if want 7; then
  section "7. The PyTorch peer (bench/check_torch_model.py)"
  TORCH_PY=${TORCH_PYTHON:-.venv-torch/bin/python}
  if ! "$TORCH_PY" -c "import torch, numpy, h5py" >/dev/null 2>&1 && [ -z "${TORCH_PYTHON:-}" ]; then
    python3 -m venv .venv-torch && .venv-torch/bin/pip install -q torch numpy h5py safetensors
  fi
  say "- torch $("$TORCH_PY" -c 'import torch; print(torch.__version__)')"
  record "$TORCH_PY" bench/check_torch_model.py --vtrain build/vtrain
  record "$TORCH_PY" bench/check_torch_model.py --vtrain build/vtrain --jax-python none \
    --vtrain-extra-args '--device emulated --act-dtype f32'
  record bash bench/check_export_torch.sh "$TORCH_PY" build/vtrain  # vtrain export's torch module
fi
say ""
say "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrote $REPORT"
