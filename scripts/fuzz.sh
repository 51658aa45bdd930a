#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc) in build-fuzz/ (or $FUZZ_BUILD) with clang, ASan and UBSan
# (CMake option VTRAIN_FUZZ, CPU only) and runs each for FUZZ_SECONDS (default 30) from a corpus
# seeded by the target itself (valid inputs written by vtrain's own writers) plus the inputs of
# past findings (tests/fuzz/regressions/<target>/, kept in git), and grown in
# build-fuzz/corpus/<target>/ across runs. Prints one line per target: executions, corpus size,
# result. Exits non-zero when a target finds a crash, a sanitizer report, an uncaught exception or
# a timeout; the input is kept in build-fuzz/findings/<target>/ (reproduce: build-fuzz/<target>
# FILE). `bash scripts/fuzz.sh shard_fuzz` runs one target. FUZZ_SEED=N fixes libFuzzer's random
# seed: from the same seed corpus (a fresh build directory) a run is then a prefix of every longer
# run with that seed, which is how the ctest fuzz.parsers stays reproducible (FUZZ_SEED=1; a
# longer run with that seed is checked before each change to a parser lands).
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-30}
B=${FUZZ_BUILD:-build-fuzz}
for tool in clang clang++; do
  command -v $tool >/dev/null || { echo "fuzz: $tool not found (Debian: clang, libclang-rt-14-dev)"; exit 2; }
done
if [ ! -f $B/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B $B -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVTRAIN_FUZZ=ON \
    -DVTRAIN_CUDA=OFF -DVTRAIN_TESTS=OFF -DVTRAIN_NATIVE=OFF >/dev/null || exit 2
fi
cmake --build $B -j "${JOBS:-$(nproc)}" >$B/build.log 2>&1 || { tail -30 $B/build.log; echo "fuzz: build failed"; exit 2; }
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
export OMP_NUM_THREADS=1
status=0
for t in "${targets[@]}"; do
  corpus=$B/corpus/$t findings=$B/findings/$t
  mkdir -p "$corpus" "$findings"
  VT_FUZZ_WRITE_SEEDS=$corpus $B/$t >/dev/null 2>&1
  # Inputs that once found a bug (tests/fuzz/regressions/<target>/) are replayed first, every run.
  [ -d tests/fuzz/regressions/$t ] && cp tests/fuzz/regressions/$t/* "$corpus"/
  log=$B/$t.log
  seed=()
  [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
  $B/$t "$corpus" "${seed[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$findings/" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  files=$(ls "$corpus" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: ${execs:-?} executions in ${SECONDS_EACH}s, corpus $files inputs, no findings"
  else
    status=1
    echo "fuzz $t: FINDING after ${execs:-?} executions (exit $rc); input in $findings/:"
    grep -E "ERROR: |SUMMARY: |runtime error|terminate called|==.*==" "$log" | head -8
    ls "$findings" | head -3
  fi
  rm -rf /tmp/vtrain-fuzz-* 2>/dev/null
done
exit $status
