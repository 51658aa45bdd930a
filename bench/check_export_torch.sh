#!/usr/bin/env bash
# bench/check_export_torch.sh: `vtrain export`'s PyTorch module (modeling_vtrain.py, the text of
# bench/torch_model.py) against vtrain's own logits (export_check.safetensors), for tiny models of
# several value modes trained a few steps; prints one line per mode and exits non-zero when one
# differs by 1e-4 (relative to the largest logit) or more. Needs a python with torch, numpy and
# safetensors (bench/reproduce.sh part 7 makes .venv-torch).
#   bash bench/check_export_torch.sh PYTHON [VTRAIN]
set -euo pipefail
PY=${1:?usage: check_export_torch.sh PYTHON [VTRAIN]}
VT=${2:-build/vtrain}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
bible Gen1:1-Gen3:24 > "$W/c.txt"
"$VT" prepare --input "$W/c.txt" --out "$W/data" --tokenizer bpe:300 --quiet
rc=0
for mode in baseline bov value-embed resformer-learnable x0v; do
  OMP_NUM_THREADS=1 "$VT" train --data "$W/data" --value "$mode" --layers 3 --dim 32 --heads 2 \
    --seq-len 32 --micro-batch 2 --steps 3 --final-eval-tokens 0 --ckpt-dir "$W/ck_$mode" > /dev/null
  "$VT" export --ckpt "$W/ck_$mode/$(cat "$W/ck_$mode/latest")" --out "$W/ex_$mode" > /dev/null
  echo -n "$mode: "
  "$PY" "$W/ex_$mode/modeling_vtrain.py" "$W/ex_$mode" || rc=1
done
exit $rc
