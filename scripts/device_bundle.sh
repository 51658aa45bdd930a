#!/usr/bin/env bash
# Packs what a GPU machine lent by the `device` tool needs to run scripts/device_window.sh
# (docs/gpu-session.md). Those machines have the CUDA toolkit, python3 with torch and numpy, and
# a newer glibc than this Debian 12 build machine, but none of our Debian packages (Open MPI,
# HDF5, abseil, OpenBLAS, PCRE2), no ssh, and an unknown x86-64 CPU.
#
# So this builds a separate tree, build-device/, for the real GPU (VTRAIN_CUDA_EMULATION=OFF:
# the kernels nvcc compiled, the CUDA runtime, cuBLASLt and NCCL) and for any x86-64-v2 CPU
# (VTRAIN_NATIVE=OFF: no -march=native code that the GPU machine's CPU may lack), then copies
# into .device/ (git-ignored, carried with `carry: [".device"]`):
#   root/usr/bin/            vtrain, attention_bench, gemm_bench, mpirun/orterun/orted
#   root/tests/              the GPU test binaries (tests/gpu/*_test.cc), with N.ranks files
#   root/usr/lib/x86_64-linux-gnu/
#                            every shared library those load that is neither glibc, the C++
#                            runtime (the target's is newer) nor CUDA (the target has its own
#                            cudart/cuBLASLt/NCCL), and Open MPI's components under
#                            openmpi/lib/openmpi3/ (plm isolated among them: no ssh there)
#   root/usr/share/openmpi/  Open MPI's help texts
#   root/etc/openmpi/        Debian's Open MPI defaults (ucx, ofi, openib off), which the
#                            window's wrappers point OPAL_SYSCONFDIR at
#   root/MANIFEST            what the bundle is: commit, emulated or not, the newest glibc and
#                            libstdc++ symbol versions its programs need (the window's facts
#                            stage checks them against the machine's), its files
# then packs root/ as .device/root.tar.gz (gzip: every machine has it; xz may be missing), or as
# root.tar.xz when the gzip file would not leave room for the working tree in a call. On the
# GPU machine scripts/device_window.sh unpacks it and writes wrappers that give the bundle's
# programs their libraries and Open MPI's relocation (OPAL_PREFIX), and nothing else.
#
# Usage: bash scripts/device_bundle.sh   (prints the bundle's size; JOBS= to limit the build)
#   VTRAIN_BUNDLE_EMULATED=1 VTRAIN_DEVICE_BUILD=build VTRAIN_BUNDLE_OUT=DIR bash ...
#     bundles an existing emulated build instead (no build here): the CI rehearsal of the window
#     (tests/launch/test_device_window.py).
set -euo pipefail
cd "$(dirname "$0")/.."
EMULATED=${VTRAIN_BUNDLE_EMULATED:-0}
BUILD=${VTRAIN_DEVICE_BUILD:-build-device}
OUT=${VTRAIN_BUNDLE_OUT:-.device}
JOBS=${JOBS:-$(nproc)}
EXCL=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [ -n "$EXCL" ]; then
  mkdir -p "$(dirname "$EXCL")"
  for p in '/.device/' '/build-device/'; do
    grep -qxF "$p" "$EXCL" 2>/dev/null || echo "$p" >> "$EXCL"
  done
fi

gpu_targets=(vtrain attention_bench gemm_bench)
for t in tests/gpu/*_test.cc; do gpu_targets+=("$(basename "$t" .cc)"); done
if [ "$EMULATED" = 1 ]; then
  # The rehearsal: the build must already exist and run on the CUDA emulation.
  for t in "${gpu_targets[@]}"; do
    f="$BUILD/$t"; [ -x "$f" ] || f="$BUILD/tests/$t"
    [ -x "$f" ] || { echo "device_bundle: $t not built in $BUILD" >&2; exit 1; }
  done
  grep -q 'VTRAIN_CUDA_EMULATION:BOOL=ON' "$BUILD/CMakeCache.txt" ||
    { echo "device_bundle: $BUILD is not an emulated build" >&2; exit 1; }
else
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVTRAIN_CUDA=ON -DVTRAIN_CUDA_EMULATION=OFF \
    -DVTRAIN_NATIVE=OFF -DVTRAIN_PYTHON="$PWD/.venv/bin/python" >/dev/null
  cmake --build "$BUILD" -j "$JOBS" --target "${gpu_targets[@]}"
  # The bundle must not need the build machine's CPU: no AVX-512 or other -march=native code.
  if grep -q -- '-march=native' "$BUILD/CMakeCache.txt" "$BUILD"/CMakeFiles/vtrain_lib.dir/flags.make; then
    echo "device_bundle: $BUILD was configured with -march=native" >&2
    exit 1
  fi
  for b in vtrain gemm_bench; do
    if ! ldd "$BUILD/$b" | grep -q 'libcublasLt'; then
      echo "device_bundle: $BUILD/$b does not link cuBLASLt (an emulated build?)" >&2
      exit 1
    fi
  done
fi

rm -rf "$OUT/root" "$OUT/root.tar.gz" "$OUT/root.tar.xz"
mkdir -p "$OUT/root/usr/bin" "$OUT/root/tests" "$OUT/root/usr/lib/x86_64-linux-gnu" \
         "$OUT/root/usr/share" "$OUT/root/etc"
bins=("$BUILD/vtrain" "$BUILD/attention_bench" "$BUILD/gemm_bench" /usr/bin/orterun /usr/bin/orted)
cp -L "$BUILD/vtrain" "$BUILD/attention_bench" "$BUILD/gemm_bench" "$OUT/root/usr/bin/"
cp -L /usr/bin/orterun /usr/bin/orted "$OUT/root/usr/bin/"
ln -sf orterun "$OUT/root/usr/bin/mpirun"
for t in tests/gpu/*_test.cc; do
  name=$(basename "$t" .cc)
  [ -x "$BUILD/tests/$name" ] || { echo "missing $BUILD/tests/$name" >&2; exit 1; }
  cp "$BUILD/tests/$name" "$OUT/root/tests/"
  bins+=("$BUILD/tests/$name")
  # Rank counts of MPI tests (`// vtrain-mpi-ranks: N ...`), for device_window.sh.
  ranks=$(sed -n 's|.*vtrain-mpi-ranks:[ ]*||p' "$t")
  [ -n "$ranks" ] && echo "$ranks" > "$OUT/root/tests/$name.ranks"
done
strip --strip-unneeded "$OUT"/root/tests/*_test "$OUT"/root/usr/bin/{vtrain,attention_bench,gemm_bench}

OMPI_PKGLIB=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
mkdir -p "$OUT/root$OMPI_PKGLIB"
cp -L "$OMPI_PKGLIB"/*.so "$OUT/root$OMPI_PKGLIB/" 2>/dev/null || true
[ -f "$OUT/root$OMPI_PKGLIB/mca_plm_isolated.so" ] || { echo "no plm isolated component" >&2; exit 1; }
cp -rL /usr/share/openmpi "$OUT/root/usr/share/"
cp -rL /etc/openmpi "$OUT/root/etc/"
for c in "$OMPI_PKGLIB"/*.so; do bins+=("$c"); done

# The shared-library closure, minus glibc, the C++/GCC runtime and CUDA.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnccl|libnvidia)'
for b in "${bins[@]}"; do
  ldd "$b" 2>/dev/null | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$OUT/root/usr/lib/x86_64-linux-gnu/$name"
done

# What the machine must offer: the newest GLIBC_ and GLIBCXX_ symbol versions any bundled file
# asks for (its dynamic symbol table's version needs).
need() {
  find "$OUT/root" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
    xargs -0 objdump -T 2>/dev/null | grep -o "($1_[0-9.]*)" | tr -d '()' | sort -uV | tail -1
}
{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "emulated $EMULATED"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "needs_glibc $(need GLIBC | sed 's/^GLIBC_//')"
  echo "needs_glibcxx $(need GLIBCXX)"
  echo "files"
  (cd "$OUT/root" && find . -type f | sort)
} > "$OUT/root/MANIFEST"

# gzip where it fits the device call's 64 MiB (with the working tree); xz, smaller, where it does
# not: the window unpacks xz with xz(1) or, where that is missing, python's tarfile.
tar -C "$OUT" -czf "$OUT/root.tar.gz" root
if [ "$(stat -c %s "$OUT/root.tar.gz")" -gt $((48 << 20)) ]; then
  tar -C "$OUT" -cJf "$OUT/root.tar.xz" root && rm -f "$OUT/root.tar.gz"
fi
rm -rf "$OUT/root"
du -sh "$OUT"/root.tar.*
