#!/usr/bin/env bash
# bench/check_export_torch.sh: `vtrain export`'s PyTorch module (modeling_vtrain.py, the text of
# bench/torch_model.py) against vtrain's own logits (export_check.safetensors), for tiny models of
# every value mode, block shape and model option, each trained a few steps; prints one line per
# case (the largest |logits - vtrain's| over the largest |logit|) and exits non-zero when one
# differs by 1e-4 or more. Where transformers imports, each export is also loaded the way
# lm-evaluation-harness loads it (AutoConfig + AutoModelForCausalLM, trust_remote_code:
# bench/check_export_hf.py): same logits to 1e-4, and generate() runs; and the exported Hugging
# Face tokenizer gives vtrain's ids (bench/check_export_tokenizer.py, with VTRAIN's data_tool).
# Needs a python with torch, numpy and safetensors (bench/reproduce.sh part 7 makes .venv-torch). A few minutes on 1 core.
#   bash bench/check_export_torch.sh PYTHON [VTRAIN] [CASE_REGEX]
set -euo pipefail
PY=${1:?usage: check_export_torch.sh PYTHON [VTRAIN] [CASE_REGEX]}
VT=${2:-build/vtrain}
ONLY=${3:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export HF_MODULES_CACHE="$W/hf_modules" HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
HF=0
"$PY" -c "import transformers" 2> /dev/null && HF=1
bible Gen1:1-Gen3:24 > "$W/c.txt"
"$VT" prepare --input "$W/c.txt" --out "$W/data" --tokenizer bpe:300 --quiet
# name: extra `vtrain train` flags (4 layers, d 32, 2 heads, T 32, short window 8 unless given).
CASES=(
  "baseline:"
  "gqa:--heads 4 --kv-heads 2"
  "resformer-identity:--value resformer-identity"
  "resformer-constant:--value resformer-constant"
  "resformer-learnable:--value resformer-learnable --detach-v1"
  "resformer-plus:--value resformer-plus"
  "resformer-plus-fixed:--value resformer-plus --plus-scale fixed --plus-init blagpt"
  "resformer-sparse:--value resformer-sparse"
  "resformer-dense:--value resformer-dense"
  "svformer:--value svformer"
  "v1:--value v1"
  "v1-coef:--value v1 --value-layers all --value-coef 1"
  "x0v:--value x0v"
  "x0v-coef:--value x0v --value-coef 0.5"
  "bov:--value bov"
  "bov-shared:--value bov --shared-table --value-layers 2,3"
  "bov-add:--value bov-add"
  "bov-add-fixed:--value bov-add --bov-add-fixed"
  "value-embed:--value value-embed"
  "neutreno:--value neutreno --neutreno-lambda 0.3"
  "resformer-hidden:--value resformer-hidden"
  "parallel:--block parallel"
  "vskipinit:--block vskipinit --value resformer-learnable"
  "vskipinit-qknorm:--block vskipinit --qk-norm on --heads 4 --kv-heads 2"
  "sas:--block sas"
  "sas-p:--block sas-p --value v1"
  "sas-norm-none:--block sas --norm none --value bov"
  "sas-proj-gains:--block sas --proj-gains on --value neutreno"
  "sas-reparam-orth:--block sas --reparam-init orth --value x0v"
  "sas-p-reparam-id:--block sas-p --reparam-init id --norm none"
  "sas-espa:--block sas --attn-bias espa"
  "sas-espa-simplest:--block sas --attn-bias espa --spa-schedule simplest --spa-centre uniform"
  "sas-p-uspa:--block sas-p --attn-bias uspa --window-pattern L --spa-rescale off"
  "sas-uspa-norm-none:--block sas --attn-bias uspa --window-pattern L --norm none --value svformer"
  "dense:--dense --value value-embed"
  "dense-dilated:--dense --dense-dilation 2 --dense-period 2 --block parallel"
  "mlp-relu:--mlp-act relu --block sas"
  "window-keys:--window-keys w+1 --window 7"
  "smear-gate:--smear-gate on --value x0v"
)
rc=0
EXPORTS=()
for c in "${CASES[@]}"; do
  name=${c%%:*}
  flags=${c#*:}
  [[ $name =~ $ONLY ]] || continue
  base="--layers 4 --dim 32 --seq-len 32 --micro-batch 2 --steps 3 --final-eval-tokens 0"
  [[ $flags == *--heads* ]] || base+=" --heads 2"
  [[ $flags == *"--window "* ]] || base+=" --window 8"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "$VT" train --data "$W/data" $base $flags --ckpt-dir "$W/ck_$name" \
    > "$W/train_$name.log" 2>&1 || { echo "$name: training failed"; cat "$W/train_$name.log"; rc=1; continue; }
  "$VT" export --ckpt "$W/ck_$name/$(cat "$W/ck_$name/latest")" --out "$W/ex_$name" > /dev/null
  echo -n "$name ($flags): "
  "$PY" "$W/ex_$name/modeling_vtrain.py" "$W/ex_$name" || rc=1
  EXPORTS+=("$W/ex_$name")
done
if [[ -d $W/ck_baseline ]]; then  # a bf16 export, against the fp32 model's logits (bound 1e-2)
  "$VT" export --ckpt "$W/ck_baseline/$(cat "$W/ck_baseline/latest")" --dtype bf16 \
    --out "$W/ex_baseline-bf16" > /dev/null
  echo -n "baseline (export --dtype bf16): "
  "$PY" "$W/ex_baseline-bf16/modeling_vtrain.py" "$W/ex_baseline-bf16" || rc=1
fi
if [[ $HF == 1 ]]; then
  "$PY" "$HERE/check_export_hf.py" "${EXPORTS[@]}" 2> "$W/hf.log" || { rc=1; cat "$W/hf.log"; }
  # The exported tokenizer (and bpe, shuffled-rank tiktoken, bytes ones) against vtrain's ids.
  "$PY" "$HERE/check_export_tokenizer.py" "$(dirname "$VT")/data_tool" "${EXPORTS[0]}" || rc=1
else
  echo "transformers does not import in $PY: the AutoModelForCausalLM check was skipped"
fi
exit $rc
