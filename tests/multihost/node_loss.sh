#!/bin/sh
# A host lost in the middle of a run of tp=2 x dp=2 over two test hosts (launch/hosts/testhosts.sh),
# with parallel.timeout_s = 20:
#  - killed: every process on host2 gets SIGKILL (a machine dying);
#  - cut: host2's link goes down (a network partition; its processes live on).
# Either way every rank on host1 has exited within parallel.timeout_s + 30 s, the job's output names
# host2 (Open MPI's, for the dead daemon) or host2's ranks (Tessera's, when a collective times out),
# every checkpoint written reads, and --resume alone on host1 at tp=1 x dp=2 carries on, with the
# single process's losses. The time each took is printed.
# Usage: node_loss.sh SOURCE TESSERA WORKDIR
set -eu
source=$1 tessera=$2 work=$3
export TESSERA_HOSTS_ID=${TESSERA_HOSTS_ID:-12}
. "$source/tests/multihost/lib.sh"
hosts_up 2
timeout_s=20
common="--config $source/configs/reverse.yaml --set model.dropout=0 --set train.log_every=1 --set train.valid_every=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50 --set checkpoint.keep_best=false --set checkpoint.every=4"

lose_host2() {  # lose_host2 kill|cut
  dir="$work/$1"
  on_hosts "host1 slots=2\nhost2 slots=2" 4 "$tessera" train $common --set train.max_steps=100000 --set parallel.tensor=2 \
    --set parallel.data=2 --set parallel.timeout_s=$timeout_s --set output.dir="$dir" > "$dir.log" 2>&1 &
  job=$!
  wait_for_file "$dir/checkpoint_00000004.h5" 240
  until grep -q '^step 5 ' "$dir.log"; do sleep 0.1; done  # in the middle of the steps after it
  [ "$(ranks_on 1)" -eq 2 ] && [ "$(ranks_on 2)" -eq 2 ] || fail "$1: not two ranks on each host"
  start=$(date +%s.%N)
  sh "$testhosts" "$1" 2
  until [ "$(ranks_on 1)" -eq 0 ]; do
    [ "$(since "$start" | cut -d. -f1)" -lt $((timeout_s + 30)) ] || { kill "$job"; fail "$1: host1's ranks still run $((timeout_s + 30)) s after host2 was lost"; }
    sleep 0.2
  done
  ranks_s=$(since "$start")
  # mpirun itself: after a kill Open MPI sees the daemon gone and ends; after a cut it waits for the
  # unreachable daemon until TCP gives up (minutes; docs/distributed.md): ended here.
  i=0
  while kill -0 "$job" 2> /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  if kill -0 "$job" 2> /dev/null; then
    kill "$job"
    mpirun_end="still waiting for host2 10 s later (stopped by the test)"
  else
    mpirun_end="ended after $(since "$start") s"
  fi
  wait "$job" && fail "$1: the job ended with status 0"
  echo "$1 host2: host1's ranks all ended $ranks_s s after it (parallel.timeout_s = $timeout_s); mpirun $mpirun_end"
}

check_resume_on_host1() {  # check_resume_on_host1 NAME: every checkpoint reads; the latest resumes at tp=1 x dp=2
  dir="$work/$1"
  for f in "$dir"/checkpoint_*.h5; do h5ls -r "$f" > /dev/null || fail "$1: $f does not read"; done
  step=$(ls "$dir" | sed -n 's/^checkpoint_0*\([0-9]*\)\.h5$/\1/p' | sort -n | tail -n 1)
  on_hosts "host1 slots=2" 2 "$tessera" train $common --set train.max_steps=$((step + 3)) --set parallel.data=2 \
    --set parallel.timeout_s=$timeout_s --set output.dir="$dir" --resume > "$dir.resumed.log" 2>&1 ||
    { cat "$dir.resumed.log"; fail "$1: --resume on host1"; }
  grep -q "resumed from .*checkpoint_0*$step.h5 at step $step " "$dir.resumed.log" || fail "$1: not resumed from step $step"
  "$tessera" train $common --set train.max_steps=$((step + 3)) --set output.dir="$work/single_$1" > "$work/single_$1.log" 2>&1 ||
    fail "single process"
  same_losses "$work/single_$1/metrics.jsonl" "$dir/metrics.jsonl" 1
}

lose_host2 kill
grep -q "Remote daemon: .* on node host2" "$work/kill.log" || { cat "$work/kill.log"; fail "kill: host2 is not named"; }
check_resume_on_host1 kill

lose_host2 cut
[ "$(grep -c "tessera: error on rank [01]: .* has waited [0-9]* s (parallel.timeout_s = $timeout_s): another rank has died or hangs: ranks 2-3 on host2 do not answer a probe" "$work/cut.log")" -ge 1 ] ||
  { cat "$work/cut.log"; fail "cut: no error naming ranks 2-3 on host2"; }
sh "$testhosts" join 2
check_resume_on_host1 cut
echo "PASS"
