#!/bin/bash
# Packs what tests/gpu/check.sh runs on a GPU machine whose image has CUDA and PyTorch but not
# our Debian libraries (HDF5, Open MPI, OpenBLAS, yaml-cpp, fmt, GTest): the GPU test and
# benchmark executables built here, the shared libraries they load, and Open MPI's and PMIx's
# plugins (the one-rank NCCL test initializes MPI), except the C/C++ runtime and the CUDA
# libraries (the GPU machine has its own: the driver, and cuBLAS, NCCL and the CUDA runtime from
# its toolkit or PyTorch's wheels).
# Usage: tests/gpu/bundle.sh BUILD_DIR OUT_DIR     (after building tessera, tessera_gpu_tests,
# tessera_backend_ops_tests, tessera_gpu_bench and tessera_gpu_kernel_bench)
# Configure BUILD_DIR with -DTESSERA_NATIVE_ARCH=OFF: -march=native code may not run on the GPU
# machine's CPU.
set -euo pipefail
build=$1 out=${2%/}
# Refused, not warned: the one GPU run of a session would die with SIGILL in every CPU reference.
if grep -qiE '^TESSERA_NATIVE_ARCH:BOOL=(ON|1|TRUE|YES|Y)$' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "bundle.sh: $build was built with -march=native (TESSERA_NATIVE_ARCH=ON); the GPU machine's CPU may lack" \
    "some of this one's instructions: configure it with -DTESSERA_NATIVE_ARCH=OFF" >&2
  exit 1
fi
rm -rf "$out" && mkdir -p "$out/lib"
# The libraries `file` loads, into lib/ (those of the system's runtime and of CUDA left out).
copy_libraries() {
  ldd "$1" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | ld-linux* | libstdc++* | libgcc_s* | libresolv* | \
        libnss* | libutil* | libanl* | libcuda.so* | libcudart* | libcublas* | libnccl* | libnvidia*) ;;
      *) [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name" ;;
    esac
  done
}
for exe in tessera tests/tessera_gpu_tests tests/tessera_backend_ops_tests tests/tessera_gpu_bench \
  tests/tessera_gpu_kernel_bench; do
  cp "$build/$exe" "$out/"
  copy_libraries "$build/$exe"
done
# MPI_Init loads its components from these folders (check.sh points Open MPI and PMIx at the copies).
multiarch=/usr/lib/x86_64-linux-gnu
for plugins in "$multiarch/openmpi/lib/openmpi3:openmpi3" "$multiarch/pmix2/lib/pmix:pmix"; do
  from=${plugins%%:*} to=$out/lib/${plugins##*:}
  [ -d "$from" ] || continue
  mkdir -p "$to"
  for so in "$from"/*.so; do
    cp -L "$so" "$to/"
    copy_libraries "$so"
  done
done
du -sh "$out"
# The device tool carries at most 64 MiB: the compressed bundle travels, and
# `tar -xJf gpu_bundle.tar.xz` (or `python3 -m tarfile -e gpu_bundle.tar.xz .`) unpacks it there.
tar -cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
ls -la "$out.tar.xz"
