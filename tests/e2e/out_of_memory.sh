#!/bin/sh
# Memory that runs out mid-run (the allocator's own cap, TESSERA_HOST_MEMORY_LIMIT_MB, as a smaller
# machine would): the step's allocation fails with exit 1 and one error naming the rank, the step,
# the bytes asked and the allocator's in-use / reserved / peak figures; the checkpoint on disk is
# untouched and --resume without the cap carries on from it to the end.
# Usage: out_of_memory.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
dir="$work/run"
args="--config $config --set output.dir=$dir --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=2 --set checkpoint.keep_last=0 --set data.synthetic_train_size=3000 --set train.memory_check=false"

"$tessera" train $args --set train.max_steps=4 > "$work/first.log" 2>&1 || { cat "$work/first.log"; fail "first run"; }
before=$(md5sum < "$dir/checkpoint_00000004.h5")

# 24 MiB: the model, its Adam state and the checkpoint's tensors fit; a step's activations do not.
status=0
TESSERA_HOST_MEMORY_LIMIT_MB=24 "$tessera" train $args --set train.max_steps=8 --resume > "$work/capped.log" \
  2> "$work/capped.err" || status=$?
cat "$work/capped.err"
[ $status -eq 1 ] || fail "exit status $status, expected 1"
[ "$(grep -c '^tessera: error: rank 0, step 5: out of host memory: allocating [0-9]* bytes ([0-9.]* MiB) failed: over the cap of 24.0 MiB (TESSERA_HOST_MEMORY_LIMIT_MB); the allocator holds [0-9.]* MiB in use, [0-9.]* MiB reserved, peak [0-9.]* MiB in use. The step changed no weight' "$work/capped.err")" -eq 1 ] \
  || fail "no error naming rank 0, step 5, the bytes and the allocator's figures"
[ "$(md5sum < "$dir/checkpoint_00000004.h5")" = "$before" ] || fail "checkpoint_00000004.h5 changed"
[ ! -e "$dir/checkpoint_00000006.h5" ] || fail "a checkpoint was written after the failure"

"$tessera" train $args --set train.max_steps=8 --resume > "$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; fail "resume failed"; }
grep -q 'resumed from .* at step 4' "$work/resumed.log" || fail "did not resume at step 4"
[ "$(grep -c '^step [5-8] ' "$work/resumed.log")" -eq 4 ] || fail "steps 5..8 not all trained"
echo "PASS: out of memory at step 5 named; checkpoint 4 untouched; resumed to step 8"
