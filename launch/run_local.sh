#!/usr/bin/env bash
# Local mpirun launcher (owns: running N vtrain ranks on this one machine). Adds what a laptop
# or a single box needs: --oversubscribe (more ranks than cores), --allow-run-as-root when root,
# no core binding, and threads per rank = cores / ranks. Everything after the options is the
# vtrain command line (the binary is prepended).
#
#   launch/run_local.sh -n 4 train --data data/kjv --tp 2 --ckpt-dir runs/x/ckpt --resume auto
#
# Options: -n N (ranks; default $VTRAIN_NP or 2), --dry-run (print the command only).
# Environment: VTRAIN_BIN (default build/vtrain next to this script), VTRAIN_MPIRUN_ARGS (more
# mpirun flags), OMP_NUM_THREADS (default cores / N).
# SIGTERM or SIGINT (Ctrl-C) to this script is passed on as SIGUSR1 (vtrain checkpoints and exits
# 75), a second one aborts; `kill -USR1 <mpirun pid>` does the same as the first. Exit code: vtrain's (0 done, 75 stopped with a
# checkpoint: run the same command again to continue with --resume auto).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NP=${VTRAIN_NP:-2}
DRY=0
while (($#)); do
  case "$1" in
    -n|--np) NP=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
(($#)) || { echo "usage: $0 [-n N] [--dry-run] train --data DIR ... (vtrain arguments)" >&2; exit 2; }
if ! [[ $NP =~ ^[0-9]+$ ]] || ((NP < 1)); then
  echo "run_local.sh: -n needs a positive number" >&2; exit 2
fi
BIN=${VTRAIN_BIN:-$ROOT/build/vtrain}
[ -x "$BIN" ] || { echo "run_local.sh: $BIN not found; build first (scripts/build.sh) or set VTRAIN_BIN" >&2; exit 2; }

THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / NP ))}
((THREADS >= 1)) || THREADS=1
MPI=(mpirun -np "$NP" --oversubscribe --bind-to none
     -x "OMP_NUM_THREADS=$THREADS" -x "OPENBLAS_NUM_THREADS=$THREADS")
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
# shellcheck disable=SC2206
MPI+=(${VTRAIN_MPIRUN_ARGS:-})
echo "[run_local] ${MPI[*]} $BIN $*" >&2
((DRY)) && exit 0

# mpirun runs in its own session so that Ctrl-C reaches only this script, which turns the first
# one into SIGUSR1 (save and stop) and a second one into SIGTERM (mpirun aborts the job).
setsid "${MPI[@]}" "$BIN" "$@" &
PID=$!
ASKED=0
# shellcheck disable=SC2317  # called from the traps below
forward() {
  if ((ASKED)); then
    echo "[run_local] got SIG$1 again: aborting the job" >&2; kill -TERM "$PID" 2>/dev/null
  else
    ASKED=1
    echo "[run_local] got SIG$1: asking vtrain to checkpoint and stop (SIGUSR1)" >&2
    kill -USR1 "$PID" 2>/dev/null
  fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
while kill -0 "$PID" 2>/dev/null; do sleep 1 & wait $!; done
wait "$PID"
RC=$?
[ "$RC" -eq 75 ] && echo "[run_local] stopped with a checkpoint; run the same command again to continue" >&2
exit "$RC"
