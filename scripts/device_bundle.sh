#!/usr/bin/env bash
# Packs what a GPU machine lent by the `device` tool needs to run vtrain's GPU tests and
# benchmark (docs/gpu-session.md). Those machines have the CUDA toolkit, python3 with torch,
# numpy, h5py and pytest, and a newer glibc than this Debian 12 build machine, but none of our
# Debian packages (Open MPI, HDF5, abseil, OpenBLAS, PCRE2), no ssh, and an unknown x86-64 CPU.
#
# So this builds a separate tree, build-device/, for the real GPU (VTRAIN_CUDA_EMULATION=OFF:
# the kernels nvcc compiled, the CUDA runtime, cuBLASLt and NCCL) and for any x86-64-v2 CPU
# (VTRAIN_NATIVE=OFF: no -march=native code that the GPU machine's CPU may lack), then copies
# into .device/ (git-ignored, carried with `carry: [".device"]`):
#   root/usr/bin/            vtrain, attention_bench, mpirun/orterun/orted
#   root/tests/              the GPU test binaries (tests/gpu/*_test.cc)
#   root/usr/lib/x86_64-linux-gnu/
#                            every shared library those load that is neither glibc, the C++
#                            runtime (the target's is newer) nor CUDA (the target has its own
#                            cudart/cuBLASLt/NCCL), and Open MPI's components under
#                            openmpi/lib/openmpi3/ (plm isolated among them: no ssh there)
#   root/usr/share/openmpi/  Open MPI's help texts
# then packs root/ as .device/root.tar.xz. On the GPU machine scripts/device_check.sh unpacks
# it and runs with OPAL_PREFIX=<root>/usr (Open MPI relocated) and LD_LIBRARY_PATH set.
# Usage: bash scripts/device_bundle.sh   (prints the bundle's size; JOBS= to limit the build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${VTRAIN_DEVICE_BUILD:-build-device}
OUT=.device
JOBS=${JOBS:-$(nproc)}
EXCL=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$EXCL")"
for p in '/.device/' '/build-device/'; do
  grep -qxF "$p" "$EXCL" 2>/dev/null || echo "$p" >> "$EXCL"
done

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVTRAIN_CUDA=ON -DVTRAIN_CUDA_EMULATION=OFF \
  -DVTRAIN_NATIVE=OFF -DVTRAIN_PYTHON="$PWD/.venv/bin/python" >/dev/null
gpu_targets=(vtrain attention_bench)
for t in tests/gpu/*_test.cc; do gpu_targets+=("$(basename "$t" .cc)"); done
cmake --build "$BUILD" -j "$JOBS" --target "${gpu_targets[@]}"
# The bundle must not need the build machine's CPU: no AVX-512 or other -march=native code.
if grep -q -- '-march=native' "$BUILD/CMakeCache.txt" "$BUILD"/CMakeFiles/vtrain_lib.dir/flags.make; then
  echo "device_bundle: $BUILD was configured with -march=native" >&2
  exit 1
fi
if ! ldd "$BUILD/vtrain" | grep -q 'libcublasLt'; then
  echo "device_bundle: $BUILD/vtrain does not link cuBLASLt (an emulated build?)" >&2
  exit 1
fi

rm -rf "$OUT"
mkdir -p "$OUT/root/usr/bin" "$OUT/root/tests" "$OUT/root/usr/lib/x86_64-linux-gnu" \
         "$OUT/root/usr/share"
bins=("$BUILD/vtrain" "$BUILD/attention_bench" /usr/bin/orterun /usr/bin/orted)
cp -L "$BUILD/vtrain" "$BUILD/attention_bench" "$OUT/root/usr/bin/"
cp -L /usr/bin/orterun /usr/bin/orted "$OUT/root/usr/bin/"
ln -sf orterun "$OUT/root/usr/bin/mpirun"
for t in tests/gpu/*_test.cc; do
  name=$(basename "$t" .cc)
  [ -x "$BUILD/tests/$name" ] || { echo "missing $BUILD/tests/$name" >&2; exit 1; }
  cp "$BUILD/tests/$name" "$OUT/root/tests/"
  bins+=("$BUILD/tests/$name")
  # Rank counts of MPI tests (`// vtrain-mpi-ranks: N ...`), for device_check.sh.
  ranks=$(sed -n 's|.*vtrain-mpi-ranks:[ ]*||p' "$t")
  [ -n "$ranks" ] && echo "$ranks" > "$OUT/root/tests/$name.ranks"
done
strip --strip-unneeded "$OUT"/root/tests/*_test "$OUT/root/usr/bin/vtrain"

OMPI_PKGLIB=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
mkdir -p "$OUT/root$OMPI_PKGLIB"
cp -L "$OMPI_PKGLIB"/*.so "$OUT/root$OMPI_PKGLIB/" 2>/dev/null || true
[ -f "$OUT/root$OMPI_PKGLIB/mca_plm_isolated.so" ] || { echo "no plm isolated component" >&2; exit 1; }
cp -rL /usr/share/openmpi "$OUT/root/usr/share/"
for c in "$OMPI_PKGLIB"/*.so; do bins+=("$c"); done

# The shared-library closure, minus glibc, the C++/GCC runtime and CUDA.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnccl|libnvidia)'
for b in "${bins[@]}"; do
  ldd "$b" 2>/dev/null | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$OUT/root/usr/lib/x86_64-linux-gnu/$name"
done

tar -C "$OUT" -cJf "$OUT/root.tar.xz" root
rm -rf "$OUT/root"
du -sh "$OUT/root.tar.xz"
