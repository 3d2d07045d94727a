#!/bin/sh
# train's pre-flight memory check, with the memory a rank can use set by TESSERA_FAULT_MEMORY_AVAILABLE_MB:
# configs/base.yaml (batch_tokens 25000) on a 16 GiB machine stops with exit 1 in seconds, before
# any vocabulary is trained, naming the prediction, the budget and settings that fit; the settings
# it suggests pass the check (a run of the same shapes reaches its data preparation); near the
# budget a warning; train.memory_check=false skips it; `tessera plan` prints the same prediction.
# Usage: memory_check.sh TESSERA REPO WORKDIR
set -eu
tessera=$1 repo=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s)
status=0
TESSERA_FAULT_MEMORY_AVAILABLE_MB=16384 "$tessera" train --config "$repo/configs/base.yaml" \
  --set output.dir="$work/base" > "$work/base.log" 2> "$work/base.err" || status=$?
cat "$work/base.err"
[ $status -eq 1 ] || fail "exit status $status, expected 1"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "the check took more than 30 s"
grep -q '^tessera: error: train: out of memory before the first step: needs ~[0-9.]* GiB per rank at batch_tokens 25000 (parameters .*); 16.0 GiB available (TESSERA_FAULT_MEMORY_AVAILABLE_MB=16384): try --set train.batch_tokens=[0-9]* --set train.accumulate=[0-9]* (~[0-9.]* GiB)' "$work/base.err" \
  || fail "no message with the prediction, the budget and a batch that fits"
[ ! -e "$work/base/vocab.model" ] || fail "a vocabulary was trained before the check"
needed=$(sed -n 's/.*needs ~\([0-9.]*\) GiB.*/\1/p' "$work/base.err")
suggested=$(sed -n 's/.*try \(--set train.batch_tokens=[0-9]* --set train.accumulate=[0-9]*\).*/\1/p' "$work/base.err")
echo "needs $needed GiB; suggested: $suggested"

# `tessera plan` predicts the same peak (plus the same allowance outside tensors).
"$tessera" plan --config "$repo/configs/base.yaml" > "$work/plan.txt"
grep -q "outside tensors: $needed GiB" "$work/plan.txt" || { cat "$work/plan.txt"; fail "plan does not predict $needed GiB"; }

# The same shapes without a corpus to encode (a synthetic task with 37,000 ids): the suggested
# settings pass the check and the run reaches its data preparation (where a SIGTERM ends it).
synthetic="--config $repo/configs/base.yaml --set data.task=copy --set data.synthetic_vocab=36996 --set data.train_src= --set data.train_tgt= --set data.valid_src= --set data.valid_tgt= --set data.synthetic_train_size=100 --set data.synthetic_valid_size=10"
status=0
# shellcheck disable=SC2086
TESSERA_FAULT_MEMORY_AVAILABLE_MB=16384 TESSERA_FAULT_SIGNAL=0:0 "$tessera" train $synthetic $suggested \
  --set output.dir="$work/fits" > "$work/fits.log" 2>&1 || status=$?
cat "$work/fits.log"
[ $status -eq 143 ] && grep -q 'SIGTERM received before the first step' "$work/fits.log" \
  || fail "the suggested settings did not pass the check (exit $status)"
! grep -q 'warning' "$work/fits.log" || fail "the suggested settings are near the limit"

# Within 10% of the budget: a warning, and the run goes on.
budget=$(awk -v n="$needed" 'BEGIN { printf "%d", n * 1024 / 0.95 }')
status=0
# shellcheck disable=SC2086
TESSERA_FAULT_MEMORY_AVAILABLE_MB=$budget TESSERA_FAULT_SIGNAL=0:0 "$tessera" train $synthetic \
  --set output.dir="$work/near" > "$work/near.log" 2>&1 || status=$?
[ $status -eq 143 ] && grep -q "^train: warning: memory is tight: needs ~$needed GiB per rank" "$work/near.log" \
  || { cat "$work/near.log"; fail "no warning near the budget (exit $status)"; }

# train.memory_check=false: no check, the run goes on.
status=0
# shellcheck disable=SC2086
TESSERA_FAULT_MEMORY_AVAILABLE_MB=1000 TESSERA_FAULT_SIGNAL=0:0 "$tessera" train $synthetic \
  --set train.memory_check=false --set output.dir="$work/off" > "$work/off.log" 2>&1 || status=$?
[ $status -eq 143 ] && ! grep -q 'out of memory' "$work/off.log" || { cat "$work/off.log"; fail "memory_check=false still checked"; }
echo "PASS: base.yaml refused in seconds before its vocabulary; the suggestion passes; warning near; check off"
