#!/usr/bin/env bash
# The README's main job: on a fresh machine, installs what is needed, builds, prepares the King
# James Bible (Debian's bible-kjv) with a trained BPE tokenizer, trains a tiny Bank-of-Values
# model for a few minutes on this machine, evaluates it, prints samples and draws the run
# (launch/plot_run.py: $OUT/plots; TensorBoard event files in $OUT/tensorboard).
# It runs on RANKS local MPI ranks (default 4: tensor parallel 2 x pipeline 2, set TP and PP;
# RANKS=1 runs one process); eval and sampling then load the checkpoint on one process.
# Environment knobs: STEPS (default 300), VALUE (default bov), OUT (default runs/demo),
# RANKS, TP, PP.
# It builds only what it runs (the vtrain binary; `bash scripts/build.sh` builds the tests too),
# showing cmake's progress, and says how long each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
since() { local s=$((SECONDS - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
bash scripts/setup.sh
T=$SECONDS
echo "[demo] building build/vtrain (a first build compiles about 200 files: see docs/status.md" \
     "\"The demo\" for the time it takes; cmake's percentage follows)"
bash scripts/build.sh vtrain
echo "[demo] build done in $(since $T)"
STEPS=${STEPS:-300}
RANKS=${RANKS:-4}
TP=${TP:-2}
PP=${PP:-2}
VALUE=${VALUE:-bov}
OUT=${OUT:-runs/demo}
DATA=data/kjv
mkdir -p data/raw "$OUT"
if [ ! -s data/raw/kjv.txt ]; then
  echo "[demo] extracting the King James Bible (bible-kjv)"
  bible Gen1:1-Rev22:21 > data/raw/kjv.txt
fi
if [ ! -f "$DATA/meta.json" ]; then
  ./build/vtrain prepare --input data/raw/kjv.txt --out "$DATA" --tokenizer bpe:4096 --val-fraction 0.02
fi
rm -rf "$OUT/metrics.jsonl" "$OUT/tensorboard"
LAUNCH=()
if [ "$RANKS" -gt 1 ]; then
  export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  LAUNCH=(mpirun --oversubscribe -np "$RANKS")
else
  TP=1 PP=1
fi
DP=$((RANKS / (TP * PP)))
echo "[demo] training a tiny '$VALUE' model for $STEPS steps on $RANKS rank(s): dp $DP x tp $TP x pp $PP"
T=$SECONDS
"${LAUNCH[@]}" ./build/vtrain train --data "$DATA" --preset tiny --value "$VALUE" \
  --tp "$TP" --pp "$PP" --micro-batch $((8 / DP)) --global-batch 2048 --steps "$STEPS" \
  --eval-every 50 --eval-tokens 16384 --log-every 10 \
  --ckpt-dir "$OUT/ckpt" --metrics "$OUT/metrics.jsonl" --tensorboard "$OUT/tensorboard" --seed 1337
echo "[demo] training done in $(since $T)"
CKPT="$OUT/ckpt/$(cat "$OUT/ckpt/latest")"
echo "[demo] evaluating $CKPT"
./build/vtrain eval --ckpt "$CKPT" --data "$DATA" --tokens 23000
echo "[demo] samples"
for prompt in "In the beginning" "And the LORD said unto Moses," "Blessed are"; do
  echo "---"
  ./build/vtrain generate --ckpt "$CKPT" --prompt "$prompt" --max-tokens 60 --temperature 0.8 --top-k 40 --seed 7
done
echo "[demo] plots: $OUT/plots (steps.png, tokens.png, summary.md)"
.venv/bin/python launch/plot_run.py "demo=$OUT/metrics.jsonl" --out "$OUT/plots" >/dev/null
echo "[demo] TensorBoard: .venv/bin/tensorboard --logdir $OUT/tensorboard"
# The loss must have fallen: first vs last training loss and first vs last val bpb.
.venv/bin/python - "$OUT/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
evals = [r for r in rows if "val_bpb" in r]
print(f"[demo] train loss {train[0]['loss']:.3f} -> {train[-1]['loss']:.3f}; "
      f"val bpb {evals[0]['val_bpb']:.3f} -> {evals[-1]['val_bpb']:.3f}")
if not (train[-1]["loss"] < train[0]["loss"] - 1.0 and evals[-1]["val_bpb"] < evals[0]["val_bpb"]):
    sys.exit("[demo] the loss did not fall as it should")
PY
echo "[demo] done in $(since $T0) (setup, build, data, training, evaluation, samples, plots)"
