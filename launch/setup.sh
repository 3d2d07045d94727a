#!/usr/bin/env bash
# Installs the Debian packages Tessera builds against, only those that are missing.
# Idempotent: a machine that has everything runs no apt-get at all. Arguments: more packages.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev     # BLAS (cblas) for the CPU kernels, threaded with OpenMP like them
  libdnnl-dev                # oneDNN: bfloat16 GEMMs on CPUs with AMX or AVX512-BF16
  libopenmpi-dev openmpi-bin # MPI communicator and mpirun
  libhdf5-openmpi-dev hdf5-tools  # parallel HDF5 checkpoints; h5ls/h5dump
  libyaml-cpp-dev            # configs
  libsentencepiece-dev sentencepiece  # subword vocabulary
  libgtest-dev libbenchmark-dev
  libcli11-dev libfmt-dev
  zlib1g-dev                 # .gz corpora
  libisal-dev                # fast CRC-32 for checkpoints
  procps                     # pgrep, used by the failure tests
  iproute2                   # ip netns: the test hosts of the multihost tests (launch/hosts)
  python3                    # drives a pseudo-terminal in e2e.translate_buffers
)
packages+=("$@")             # more, named on the command line (CI's Clang build: clang libomp-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
