#!/bin/sh
# A NaN in the gradients (injected: TESSERA_FAULT_NAN="RANK:STEP" makes that backward start from
# NaN, as a diverging run's would) stops training before that update with a clear error and exit 1;
# the checkpoints written before it stay, none is written after it, and --resume carries on from the
# last one to the end with finite losses.
# Usage: non_finite_gradients.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
dir="$work/run"
args="--config $config --set output.dir=$dir --set train.max_steps=10 --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=2 --set checkpoint.keep_last=0 --set data.synthetic_train_size=3000"

status=0
TESSERA_FAULT_NAN=0:5 "$tessera" train $args > "$work/nan.log" 2> "$work/nan.err" || status=$?
cat "$work/nan.err"
[ $status -eq 1 ] || fail "exit status $status, expected 1"
[ "$(grep -c '^tessera: error: step 5: the gradient norm is NaN (loss [^)]*): training stopped before this update' "$work/nan.err")" -eq 1 ] \
  || fail "no error naming step 5 and the NaN gradient norm (exactly once)"
ls "$dir"
[ -e "$dir/checkpoint_00000004.h5" ] || fail "the checkpoint of step 4 is gone"
[ ! -e "$dir/checkpoint_00000006.h5" ] && [ ! -e "$dir/model.h5" ] || fail "a file was written after the NaN"
! grep -q '^step 5 ' "$work/nan.log" || fail "step 5 was logged as done"

"$tessera" train $args --resume > "$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; fail "resume failed"; }
grep "resumed from" "$work/resumed.log"
grep -q 'resumed from .* at step 4' "$work/resumed.log" || fail "did not resume at step 4"
[ "$(grep -c '^step [0-9]* .* loss [0-9]*\.[0-9]* ' "$work/resumed.log")" -eq 6 ] || fail "steps 5..10 not all finite"
[ -e "$dir/model.h5" ] || fail "no model.h5 after the resumed run"
echo "PASS: stopped at step 5 before the update; resumed from step 4 to 10"
