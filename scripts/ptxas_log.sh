#!/usr/bin/env bash
# Compiler launcher of the nvcc-built kernels (CMakeLists.txt, RULE_LAUNCH_COMPILE of
# vtrain_kernels_sm90): runs the compile command it is given and keeps the ptxas -v report
# (registers, spills, stack, shared memory per kernel) in <object>.ptxas.txt next to the object.
# Everything else the compiler prints (warnings, errors) still goes to the build's stderr.
# Read by tests/sass/test_sass.py and bench/static_report.py (through tools/kernel_resources.py).
set -u
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
done
if [ -z "$out" ]; then
  exec "$@"
fi
log="$out.ptxas.txt"
"$@" 2>"$log.tmp"
rc=$?
grep -v -E '^ptxas info +:|^ +[0-9]+ bytes stack frame' "$log.tmp" >&2
mv "$log.tmp" "$log"
exit $rc
