#!/bin/sh
# Preemption without a scheduler, on two test hosts (launch/hosts/testhosts.sh): tp=2 x dp=2 with
# dropout on, every tessera process on both hosts sent SIGTERM at once (what a scheduler's
# preemption does): the ranks agree on the step, save one checkpoint and exit 143, as does mpirun;
# --resume over the same two hosts finishes the run, and the final weights equal an uninterrupted
# run's bit for bit (h5diff). The time from the signal to the job's end is printed.
# Usage: preemption.sh SOURCE TESSERA WORKDIR
set -eu
source=$1 tessera=$2 work=$3
export TESSERA_HOSTS_ID=${TESSERA_HOSTS_ID:-13}
. "$source/tests/multihost/lib.sh"
hosts_up 2
two_hosts="host1 slots=2\nhost2 slots=2"
args="--config $source/configs/reverse.yaml --set model.dropout=0.1 --set train.log_every=1 --set train.valid_every=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50 --set checkpoint.every=0 --set train.max_steps=10 --set parallel.tensor=2 --set parallel.data=2 --set parallel.timeout_s=120"

on_hosts "$two_hosts" 4 "$tessera" train $args --set output.dir="$work/whole" > "$work/whole.log" 2>&1 ||
  { cat "$work/whole.log"; fail "the uninterrupted run"; }

on_hosts "$two_hosts" 4 "$tessera" train $args --set output.dir="$work/preempted" > "$work/preempted.log" 2>&1 &
job=$!
i=0
until grep -q '^step 3 ' "$work/preempted.log"; do
  i=$((i + 1))
  [ $i -lt 2400 ] || { kill "$job"; fail "no step 3 within 240 s"; }
  sleep 0.1
done
start=$(date +%s.%N)
signal_ranks TERM 1 2
status=0
wait "$job" || status=$?
echo "SIGTERM on every rank of two hosts: the job ended with status $status after $(since "$start") s"
[ $status -eq 143 ] || { cat "$work/preempted.log"; fail "the job's exit status is $status, not 143"; }
grep -q "SIGTERM received: stopped after step [0-9]*; .*checkpoint_[0-9]*\.h5 holds the run" "$work/preempted.log" ||
  { cat "$work/preempted.log"; fail "no stop message"; }
[ "$(ls "$work/preempted" | grep -c '^checkpoint_[0-9]*\.h5$')" -eq 1 ] || fail "not one checkpoint: $(ls "$work/preempted")"
step=$(ls "$work/preempted" | sed -n 's/^checkpoint_0*\([0-9]*\)\.h5$/\1/p')
[ "$step" -lt 10 ] || fail "stopped at step $step, not before the end"

on_hosts "$two_hosts" 4 "$tessera" train $args --set output.dir="$work/preempted" --resume > "$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log"; fail "the resume"; }
grep -q "resumed from .* at step $step " "$work/resumed.log" || fail "not resumed at step $step"
h5diff "$work/whole/model.h5" "$work/preempted/model.h5" /model /model > /dev/null ||
  fail "the preempted and resumed run's final weights differ from the uninterrupted run's"
echo "stopped at step $step, resumed: final weights equal the uninterrupted run's (h5diff)"
echo "PASS"
