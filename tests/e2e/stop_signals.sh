#!/bin/sh
# SIGTERM and SIGINT: training finishes its step, writes a checkpoint, exits with 128 + signal;
# --resume then carries on from that checkpoint to the end.
# Usage: stop_signals.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
for pair in TERM:15 INT:2; do
  sig=${pair%:*} number=${pair#*:}
  dir="$work/$sig"
  args="--config $config --set output.dir=$dir --set train.max_steps=100000 --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=0"
  # setsid: a background job of a non-interactive shell ignores SIGINT; a session of its own does not.
  setsid "$tessera" train $args > "$work/$sig.log" 2>&1 &
  pid=$!
  i=0
  until grep -q '^step 3 ' "$work/$sig.log"; do
    i=$((i + 1))
    [ $i -lt 1200 ] || { echo "no training progress after 120 s"; kill -9 $pid; exit 1; }
    sleep 0.1
  done
  kill -s $sig $pid
  status=0
  wait $pid || status=$?
  tail -n 2 "$work/$sig.log"
  expected=$((128 + number))
  [ $status -eq $expected ] || { echo "FAIL: SIG$sig gave exit status $status, expected $expected"; exit 1; }
  grep -q "SIG$sig received: stopped after step [0-9]*; .*checkpoint_[0-9]*\.h5 holds the run" "$work/$sig.log"
  saved=$(ls "$dir" | grep -c '^checkpoint_[0-9]*\.h5$')
  [ "$saved" -eq 1 ] || { echo "FAIL: expected one checkpoint, found $saved"; exit 1; }
  step=$(ls "$dir" | sed -n 's/^checkpoint_0*\([0-9]*\)\.h5$/\1/p')
  "$tessera" train $args --set train.max_steps=$((step + 3)) --resume > "$work/$sig.resumed.log" 2>&1
  grep -q "resumed from .* at step $step " "$work/$sig.resumed.log"
  grep -q "saved .*model.h5 after $((step + 3)) steps" "$work/$sig.resumed.log"
done
echo "PASS"
