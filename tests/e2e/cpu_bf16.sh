#!/bin/sh
# train.precision bf16 on the CPU (bfloat16 GEMMs through oneDNN): the log names the kernel; the
# losses stay within 2% of float32's at every step but are not float32's; a resume from a
# checkpoint goes on with the uninterrupted run's losses bit for bit; two data-parallel processes
# give one process's losses. Skips (77) on a CPU without AMX or AVX512-BF16, after checking the
# refusal names the host and the key.
# Usage: cpu_bf16.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$(dirname "$0")/same_losses.sh"  # losses, run
common="--config $config --set train.max_steps=8 --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=4 --set checkpoint.keep_best=false --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=8"

if ! "$tessera" train $common --set train.precision=bf16 --set output.dir="$work/bf16" > "$work/bf16.log" 2>&1; then
  grep -q "train.precision = bf16 on the CPU needs AMX or AVX512-BF16, which the CPU of host .* lacks" "$work/bf16.log" ||
    { cat "$work/bf16.log"; fail "bf16 failed without the refusal"; }
  echo "SKIP: no bfloat16 units on this CPU"; exit 77
fi
grep -q "bfloat16 GEMMs: oneDNN [a-z]" "$work/bf16.log" || fail "the log does not name the bfloat16 GEMM kernel"
run fp32 1
losses "$work/fp32/metrics.jsonl" > "$work/f.txt" && losses "$work/bf16/metrics.jsonl" > "$work/h.txt"
join "$work/f.txt" "$work/h.txt" | awk '
  { n++; d = $2 - $4; if (d < 0) d = -d; if (d > 0.02 * $2) { bad++; print "step " $1 ": loss " $2 " vs " $4 } if ($2 != $4) differ++ }
  END { if (n != 8 || bad > 0) { print "FAIL: bf16 losses not within 2% of fp32 (" n + 0 " steps)"; exit 1 }
        if (differ == 0) { print "FAIL: bf16 losses equal fp32 bit for bit: the GEMMs ran in float32"; exit 1 } }'
run resumed 1 --set train.precision=bf16 --resume "$work/bf16/checkpoint_00000004.h5"
losses "$work/bf16/metrics.jsonl" | awk '$1 > 4' > "$work/c.txt"
losses "$work/resumed/metrics.jsonl" | awk '$1 > 4' > "$work/d.txt"
[ "$(wc -l < "$work/c.txt")" -eq 4 ] && cmp -s "$work/c.txt" "$work/d.txt" || fail "the resumed bf16 run differs"
run bf16_dp2 2 --set train.precision=bf16 --set parallel.data=2
# Within 1e-3, not fp32's 1e-5: a last-bit difference in a sum (the ranks sum the gradient in
# another order) can move an operand across a bfloat16 rounding boundary, 2^-9 relative. A gradient
# counted twice or a batch left out moves them by percents.
losses "$work/bf16_dp2/metrics.jsonl" > "$work/p.txt"
join "$work/h.txt" "$work/p.txt" | awk '
  function off(a, b) { d = a - b; if (d < 0) d = -d; return d > 1e-3 * (a < 0 ? -a : a) }
  { n++; if (off($2, $4) || off($3, $5)) { bad++; print "step " $1 ": " $2 " " $3 " vs " $4 " " $5 } }
  END { if (n != 8 || bad > 0) { print "FAIL: dp=2 bf16 is not one process (" n + 0 " steps)"; exit 1 } }'
echo PASS
