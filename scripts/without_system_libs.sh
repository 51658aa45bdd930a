#!/usr/bin/env bash
# Runs a command in a private mount namespace where this machine's Open MPI, HDF5, OpenBLAS
# and abseil are hidden (each library file covered by /dev/null, their folders by an empty
# tmpfs, mpirun/orterun/orted by /dev/null): what a GPU machine without our Debian packages looks
# like to the device bundle. (PCRE2 stays: mount(8) itself loads it, through libselinux.) tests/launch/test_device_window.py runs the GPU window so, to prove
# the bundle carries everything it loads. Needs root and unshare(1) with mount namespaces.
#
# Usage: bash scripts/without_system_libs.sh CMD [ARGS...]
#   exit 3 when namespaces are not permitted here (the caller decides to skip), else CMD's exit.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: without_system_libs.sh CMD [ARGS...]" >&2
  exit 2
fi
if ! unshare -m --propagation private true 2>/dev/null; then
  echo "without_system_libs: mount namespaces are not permitted here (unshare -m failed)" >&2
  exit 3
fi
exec unshare -m --propagation private bash -c '
  set -u
  L=/usr/lib/x86_64-linux-gnu
  n=0
  for f in $L/libmpi* $L/libopen-pal* $L/libopen-rte* $L/libhdf5* $L/libopenblas* $L/libblas* \
           $L/liblapack* $L/libabsl_* $L/libhwloc* \
           $L/openblas*/*.so* $L/blas/*.so* $L/lapack/*.so* \
           /usr/bin/mpirun /usr/bin/orterun /usr/bin/orted /usr/bin/mpiexec; do
    [ -e "$f" ] || continue
    mount --bind /dev/null "$f" && n=$((n + 1))
  done
  for d in $L/openmpi $L/hdf5 /etc/openmpi /usr/share/openmpi; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
  done
  echo "without_system_libs: $n files hidden" >&2
  exec "$@"
' without_system_libs "$@"
