#!/bin/bash
# Packs what tests/gpu/check.sh runs on a GPU machine whose image has CUDA and PyTorch but not
# our Debian libraries (HDF5, Open MPI, OpenBLAS, yaml-cpp, fmt, GTest): the GPU test and
# benchmark executables built here, and the shared libraries they load, except the C/C++
# runtime and the CUDA libraries (the GPU machine has its own: the driver, and cuBLAS, NCCL
# and the CUDA runtime from its toolkit or PyTorch's wheels).
# Usage: tests/gpu/bundle.sh BUILD_DIR OUT_DIR     (after building tessera, tessera_gpu_tests and tessera_gpu_bench)
set -euo pipefail
build=$1 out=${2%/}
rm -rf "$out" && mkdir -p "$out/lib"
for exe in tessera tests/tessera_gpu_tests tests/tessera_gpu_bench; do
  cp "$build/$exe" "$out/"
  ldd "$build/$exe" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | ld-linux* | libstdc++* | libgcc_s* | libcuda.so* | \
        libcudart* | libcublas* | libnccl* | libnvidia*) ;;
      *) cp -L "$path" "$out/lib/$name" ;;
    esac
  done
done
du -sh "$out"
# The device tool carries at most 64 MiB: the compressed bundle (~16 MB) travels, and
# `tar -xJf gpu_bundle.tar.xz` unpacks it there.
tar -cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
ls -la "$out.tar.xz"
