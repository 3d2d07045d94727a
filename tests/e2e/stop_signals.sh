#!/bin/sh
# SIGTERM and SIGINT: training finishes its step, writes a checkpoint, exits with 128 + signal;
# --resume then carries on from that checkpoint to the end; a second signal exits at once; the step
# stopped at is logged. A SIGTERM before the first step saves nothing and exits at once; the log
# reaches its file line by line.
# Usage: stop_signals.sh TESSERA CONFIG WORKDIR
set -eu
tessera=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
wait_for_line() {  # wait_for_line PATTERN LOG PID: until LOG has PATTERN (at most 120 s)
  i=0
  until grep -q "$1" "$2"; do
    i=$((i + 1))
    [ $i -lt 1200 ] || { echo "FAIL: no '$1' in $2 after 120 s"; kill -9 "$3"; exit 1; }
    sleep 0.1
  done
}
for pair in TERM:15 INT:2; do
  sig=${pair%:*} number=${pair#*:}
  dir="$work/$sig"
  args="--config $config --set output.dir=$dir --set train.max_steps=100000 --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=0"
  # setsid: a background job of a non-interactive shell ignores SIGINT; a session of its own does not.
  setsid "$tessera" train $args > "$work/$sig.log" 2>&1 &
  pid=$!
  wait_for_line '^step 3 ' "$work/$sig.log" $pid
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
# A second signal ends the process at once: SIGINT asks for a checkpoint (exit 130 when it is
# written), a SIGTERM 0.2 s later, well inside a step of a model this size, kills it (143), and no
# checkpoint is written. (Two different signals: two of one kind could merge into one.)
setsid "$tessera" train --config "$config" --set output.dir="$work/twice" --set train.max_steps=100000 \
  --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=0 --set model.d_model=256 \
  --set model.d_ff=2048 --set train.batch_tokens=4000 > "$work/twice.log" 2>&1 &
pid=$!
wait_for_line '^step 1 ' "$work/twice.log" $pid
kill -s INT $pid
sleep 0.2
kill -s TERM $pid
status=0
wait $pid || status=$?
[ $status -eq 143 ] || { tail -n 3 "$work/twice.log"; echo "FAIL: a second signal gave exit status $status, not 143 at once"; exit 1; }
grep -q 'received: stopped after step' "$work/twice.log" && { echo "FAIL: the second signal waited for the checkpoint"; exit 1; }
[ "$(ls "$work/twice" | grep -c '\.h5$')" -eq 0 ] || { echo "FAIL: a checkpoint was written after the second signal"; exit 1; }
# A SIGTERM during the final validation (beam 4 over 10,000 sentences: about 5 s; 2,000 took 1 s
# once decoding got faster, and the signal came too late): the validation is not scored, the run's
# files are written, and the log says why the exit status is 143.
"$tessera" train --config "$config" --set output.dir="$work/final" --set train.max_steps=20 --set train.log_every=10 \
  --set train.valid_every=0 --set decode.beam=4 --set data.synthetic_valid_size=10000 > "$work/final.log" 2>&1 &
pid=$!
wait_for_line '^step 20 ' "$work/final.log" $pid
sleep 1
kill -s TERM $pid
status=0
wait $pid || status=$?
tail -n 3 "$work/final.log"
[ $status -eq 143 ] && grep -q "train: SIGTERM received during the final validation (not scored); exiting with status 143" \
  "$work/final.log" || { echo "FAIL: a SIGTERM during the final validation (status $status)"; exit 1; }
[ -f "$work/final/model.h5" ] || { echo "FAIL: no model.h5 after a SIGTERM during the final validation"; exit 1; }
# The step a signal stops at is logged, also off train.log_every (a SIGTERM injected after step 7's
# stop agreement stops after step 8; log_every 5): no step's loss is missing from the metrics.
status=0
TESSERA_FAULT_SIGNAL=0:7 "$tessera" train --config "$config" --set output.dir="$work/logged" --set train.log_every=5 \
  --set train.valid_every=0 --set checkpoint.every=0 > "$work/logged.log" 2>&1 || status=$?
[ $status -eq 143 ] && grep -q "SIGTERM received: stopped after step 8;" "$work/logged.log" ||
  { cat "$work/logged.log"; echo "FAIL: the injected SIGTERM did not stop the run after step 8 (status $status)"; exit 1; }
[ "$(grep -o '"step": [0-9]*,' "$work/logged/metrics.jsonl" | tr -d '\n')" = '"step": 5,"step": 8,' ] && grep -q '^step 8 | ' "$work/logged.log" ||
  { cat "$work/logged.log"; echo "FAIL: the step the signal stopped at was not logged"; exit 1; }
# ... also when the signal cuts the step's validation short (log_every 7, valid_every 10: step 10).
status=0
TESSERA_FAULT_SIGNAL=0:10 "$tessera" train --config "$config" --set output.dir="$work/logged_valid" --set train.log_every=7 \
  --set train.valid_every=10 --set decode.beam=4 --set data.synthetic_valid_size=2000 --set checkpoint.every=0 \
  > "$work/logged_valid.log" 2>&1 || status=$?
[ $status -eq 143 ] && grep -q "^valid 10: interrupted by a stop signal" "$work/logged_valid.log" ||
  { cat "$work/logged_valid.log"; echo "FAIL: the injected SIGTERM did not cut step 10's validation short (status $status)"; exit 1; }
[ "$(grep -o '^{"step": [0-9]*,' "$work/logged_valid/metrics.jsonl" | tr -d '\n')" = '{"step": 7,{"step": 10,' ] ||
  { cat "$work/logged_valid.log"; echo "FAIL: the step whose validation the signal stopped was not logged"; exit 1; }
# A SIGTERM during the data preparation (injected at "step 0"): this session trained nothing, so it
# saves nothing and exits 143 at once instead of training a step first.
status=0
TESSERA_FAULT_SIGNAL=0:0 "$tessera" train --config "$config" --set output.dir="$work/early" --set train.max_steps=50 \
  > "$work/early.log" 2>&1 || status=$?
[ $status -eq 143 ] && grep -q "SIGTERM received before the first step of this session: nothing to save" "$work/early.log" ||
  { cat "$work/early.log"; echo "FAIL: a SIGTERM during the data preparation (status $status)"; exit 1; }
[ "$(ls "$work/early" | grep -c '\.h5$')" -eq 0 ] || { echo "FAIL: a checkpoint was written"; exit 1; }
# The log is written line by line, also into a file: a run stuck in its data preparation (an
# injected hang) has already logged its config and data lines, which a kill would otherwise lose.
TESSERA_FAULT_HANG=0:0 "$tessera" train --config "$config" --set output.dir="$work/hang" > "$work/hang.log" 2>&1 &
pid=$!
i=0
until grep -q '^data: ' "$work/hang.log"; do
  i=$((i + 1))
  [ $i -lt 600 ] || { kill -9 $pid; echo "FAIL: nothing logged during the data preparation after 60 s"; exit 1; }
  sleep 0.1
done
kill -9 $pid
wait $pid || true
grep -q '^config (effective):' "$work/hang.log" || { echo "FAIL: the config was not logged"; exit 1; }
echo "PASS"
