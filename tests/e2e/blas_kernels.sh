#!/bin/sh
# OpenBLAS before 0.3.25 runs its SSE3 ("Prescott") kernels on Intel CPUs newer than itself, about
# 3x slower than the AVX-512 ones: where the CPU has AVX2 and FMA, tessera reruns itself with
# OPENBLAS_CORETYPE set (and says so), also under mpirun, under its own name; a core the user
# sets is kept.
# Usage: blas_kernels.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
fallback_cores="Katmai Coppermine Northwood Prescott Banias Atom Core2 Penryn Dunnington Nehalem Sandybridge"
avx2=no
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && avx2=yes
# Fails when the output names one of the fallback cores' kernels on a CPU with AVX2.
check_fits() {
  [ $avx2 = yes ] || return 0
  for core in $fallback_cores; do
    case "$1" in *" $core kernels"*) fail "$core kernels on a CPU with AVX2 and FMA: $1" ;; esac
  done
}

out=$(env -u OPENBLAS_CORETYPE -u TESSERA_OPENBLAS_FALLBACK_CORE "$tessera" --version) || fail "--version"
echo "$out"
check_fits "$out"
case "$out" in *"OpenBLAS "*" kernels"*) ;; *) fail "--version does not name the BLAS kernels" ;; esac

out=$(env -u TESSERA_OPENBLAS_FALLBACK_CORE OPENBLAS_CORETYPE=Prescott "$tessera" --version) || fail "--version"
echo "$out"
case "$out" in *"Prescott kernels (OPENBLAS_CORETYPE=Prescott)"*) ;; *) fail "OPENBLAS_CORETYPE=Prescott not kept" ;; esac

# Every rank of a training run, before MPI starts: the run ends as it should and logs its kernels.
tiny="--config $config --set data.synthetic_train_size=64 --set data.synthetic_valid_size=8 --set model.layers=1 --set model.d_model=32 --set model.d_ff=64 --set model.heads=2 --set train.valid_every=0 --set train.log_every=1 --set train.max_steps=2"
if command -v mpirun > /dev/null; then
  env -u OPENBLAS_CORETYPE -u TESSERA_OPENBLAS_FALLBACK_CORE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 300 mpirun -np 2 --oversubscribe "$tessera" train $tiny --set parallel.data=2 --set output.dir="$work/dp" \
    > "$work/dp.log" 2>&1 || { cat "$work/dp.log"; fail "the 2-rank run"; }
  line=$(grep '^device: cpu' "$work/dp.log") || { cat "$work/dp.log"; fail "no device line"; }
  echo "$line"
  check_fits "$line"
  grep -q '^step 2 ' "$work/dp.log" || { cat "$work/dp.log"; fail "the 2-rank run did not reach step 2"; }
fi
# The rerun keeps the process's name (ps, top, pgrep and killall look for "tessera").
env -u OPENBLAS_CORETYPE -u TESSERA_OPENBLAS_FALLBACK_CORE "$tessera" train $tiny --set train.max_steps=1000000 \
  --set output.dir="$work/name" > "$work/name.log" 2>&1 &
pid=$!
i=0
until grep -q '^step 1 ' "$work/name.log"; do
  i=$((i + 1))
  [ $i -lt 600 ] || { kill -9 $pid; cat "$work/name.log"; fail "no step 1 after 60 s"; }
  sleep 0.1
done
name=$(ps -o comm= -p $pid)
kill -9 $pid
wait $pid 2> /dev/null || true
[ "$name" = tessera ] || fail "the process is named '$name', not tessera"
echo PASS
