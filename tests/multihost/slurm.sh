#!/bin/sh
# A two-node Slurm cluster on two test hosts (launch/slurm/testcluster.sh on launch/hosts/testhosts.sh)
# runs launch/slurm/train.sbatch (srun --mpi=pmix, tp=2 x dp=2, two tasks per node):
#  - a job trains to the end;
#  - another is preempted (scancel --signal=TERM: every task gets SIGTERM), saves a checkpoint, exits
#    143, is requeued by its script, resumes and finishes; its final weights equal the first job's bit
#    for bit (h5diff). The time from the signal to the requeued job's end is printed.
# Skipped (exit 77) where namespaces cannot be made or Slurm is not installed.
# Usage: slurm.sh SOURCE TESSERA WORKDIR (WORKDIR not under /tmp: each host has a /tmp of its own)
set -eu
source=$1 tessera=$2 work=$3
export TESSERA_HOSTS_ID=${TESSERA_HOSTS_ID:-14}
. "$source/tests/multihost/lib.sh"
for p in slurmctld slurmd munged sbatch; do
  command -v $p > /dev/null || { echo "SKIP: no $p: install slurmctld slurmd munge slurm-client (bash launch/setup.sh slurmctld slurmd munge slurm-client)"; exit 77; }
done
cluster="$work/cluster"
mkdir -p "$cluster"
hosts_up 2
trap 'sh "$source/launch/slurm/testcluster.sh" down "$cluster"; sh "$testhosts" down' EXIT
sh "$source/launch/slurm/testcluster.sh" up "$cluster" > /dev/null || fail "the Slurm cluster did not start"
export SLURM_CONF="$cluster/slurm.conf"
i=0
until [ "$(sinfo -h -o '%T %D' 2> /dev/null)" = "idle 2" ]; do
  i=$((i + 1))
  [ $i -lt 300 ] || { sinfo; tail "$cluster"/*.log; fail "the two nodes are not idle after 30 s"; }
  sleep 0.1
done

job_state() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_for_job() {  # wait_for_job ID: until it has ended (at most 300 s); prints its state
  i=0
  until state=$(job_state "$1") && case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) true ;; *) false ;; esac; do
    i=$((i + 1))
    [ $i -lt 3000 ] || { scancel "$1"; fail "job $1 still $state after 300 s"; }
    sleep 0.1
  done
  echo "$state"
}
cd "$work"
export CONFIG="$source/configs/reverse.yaml" TP=2 TESSERA="$tessera" OMPI_MCA_btl_tcp_if_include="198.18.$TESSERA_HOSTS_ID.0/24"
args="--set model.dropout=0.1 --set train.log_every=1 --set train.valid_every=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50 --set checkpoint.every=0 --set train.max_steps=8 --set parallel.timeout_s=120"

whole=$(TESSERA_ARGS="$args --set output.dir=$work/whole" sbatch --parsable "$source/launch/slurm/train.sbatch")
[ "$(wait_for_job "$whole")" = COMPLETED ] || { cat "tessera-$whole.out"; fail "job $whole did not complete"; }
grep -q '^hosts: host1 (ranks 0-1, local 0-1), host2 (ranks 2-3, local 0-1)$' "tessera-$whole.out" ||
  { cat "tessera-$whole.out"; fail "job $whole did not run two ranks on each node"; }

job=$(TESSERA_ARGS="$args --set output.dir=$work/preempted" sbatch --parsable "$source/launch/slurm/train.sbatch")
i=0
until grep -q '^step 2 ' "tessera-$job.out" 2> /dev/null; do
  i=$((i + 1))
  [ $i -lt 3000 ] || { scancel "$job"; fail "job $job logged no step 2 within 300 s"; }
  sleep 0.1
done
start=$(date +%s.%N)
scancel --signal=TERM "$job"
[ "$(wait_for_job "$job")" = COMPLETED ] || { cat "tessera-$job.out"; fail "the preempted job $job did not complete"; }
echo "preempted (scancel --signal=TERM), requeued and finished $(since "$start") s after the signal"
grep -q "SIGTERM received: stopped after step [0-9]*; .*checkpoint_[0-9]*\.h5 holds the run" "tessera-$job.out" ||
  { cat "tessera-$job.out"; fail "job $job did not stop on SIGTERM"; }
grep -q "tessera: job $job step ended with status 143 (restart 0)" "tessera-$job.out" || fail "the first run did not exit 143"
grep -q "resumed from .*checkpoint_[0-9]*\.h5 at step " "tessera-$job.out" || fail "the requeued job did not resume"
scontrol show job "$job" | grep -q "Restarts=1" || fail "job $job was not requeued once"
h5diff "$work/whole/model.h5" "$work/preempted/model.h5" /model /model > /dev/null ||
  fail "the preempted, requeued job's final weights differ from the uninterrupted job's"
echo "requeued job's final weights equal the uninterrupted job's (h5diff)"
echo "PASS"
