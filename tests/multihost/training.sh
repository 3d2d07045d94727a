#!/bin/sh
# Training across two test hosts (network namespaces, Open MPI over TCP; launch/hosts/testhosts.sh):
#  - each rank runs on its host (hostname, only 198.18.ID.K addresses), local ranks 0,1 on each host;
#  - tp=2 x dp=2 over two hosts of two slots gives the single process's losses (float32, 1e-5), and
#    its checkpoint resumes on one host at tp=1 x dp=2 with the same losses;
#  - a tensor-parallel group spanning hosts (one slot per host) is warned of, naming the hosts;
#  - an output.dir that is another folder on host2 (a mount namespace: a node-local disk) stops the
#    job at the start with one error naming host2's ranks, and nothing is written into either folder.
# Usage: training.sh SOURCE TESSERA WORKDIR
set -eu
source=$1 tessera=$2 work=$3
export TESSERA_HOSTS_ID=${TESSERA_HOSTS_ID:-11}
. "$source/tests/multihost/lib.sh"
hosts_up 2
two_hosts="host1 slots=2\nhost2 slots=2"

# The hosts themselves: names, addresses, local ranks as Open MPI counts them (its warnings, such as
# a setpgid race of the rsh launcher, go to standard error, kept apart).
on_hosts "$two_hosts" 4 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK $(hostname) local $OMPI_COMM_WORLD_LOCAL_RANK $(ip -o addr show | awk "\$2 != \"lo\" { print \$4 }" | tr "\n" " ")"' \
  > "$work/hosts.txt" 2> "$work/hosts.err" || { cat "$work/hosts.txt" "$work/hosts.err"; fail "mpirun over the test hosts"; }
sort "$work/hosts.txt" > "$work/hosts.sorted"
printf 'rank 0 host1 local 0 198.18.%s.1/24 \nrank 1 host1 local 1 198.18.%s.1/24 \nrank 2 host2 local 0 198.18.%s.2/24 \nrank 3 host2 local 1 198.18.%s.2/24 \n' \
  "$TESSERA_HOSTS_ID" "$TESSERA_HOSTS_ID" "$TESSERA_HOSTS_ID" "$TESSERA_HOSTS_ID" > "$work/hosts.expected"
cmp "$work/hosts.sorted" "$work/hosts.expected" || { cat "$work/hosts.sorted"; fail "ranks, hosts or addresses are not as expected"; }

common="--config $source/configs/reverse.yaml --set model.dropout=0 --set train.log_every=1 --set train.valid_every=0 --set data.synthetic_train_size=2000 --set data.synthetic_valid_size=50 --set checkpoint.keep_best=false --set parallel.timeout_s=120"
"$tessera" train $common --set train.max_steps=12 --set checkpoint.every=6 --set output.dir="$work/single" > "$work/single.log" 2>&1 ||
  { cat "$work/single.log"; fail "single process"; }

start=$(date +%s.%N)
on_hosts "$two_hosts" 4 "$tessera" train $common --set train.max_steps=12 --set checkpoint.every=6 \
  --set parallel.tensor=2 --set parallel.data=2 --set output.dir="$work/two_hosts" > "$work/two_hosts.log" 2>&1 ||
  { cat "$work/two_hosts.log"; fail "tp=2 x dp=2 on two hosts"; }
echo "tp=2 x dp=2 on two hosts, 12 steps: $(since "$start") s"
grep -q '^hosts: host1 (ranks 0-1, local 0-1), host2 (ranks 2-3, local 0-1)$' "$work/two_hosts.log" ||
  fail "no hosts line with local ranks 0-1 on each host: $(grep '^hosts' "$work/two_hosts.log")"
! grep -q "span hosts" "$work/two_hosts.log" || fail "warned of groups spanning hosts where none does"
same_losses "$work/single/metrics.jsonl" "$work/two_hosts/metrics.jsonl" 1

# The two-host checkpoint resumes on one host, in another layout.
on_hosts "host1 slots=2" 2 "$tessera" train $common --set train.max_steps=12 --set checkpoint.every=6 \
  --set parallel.data=2 --set output.dir="$work/one_host" --resume "$work/two_hosts/checkpoint_00000006.h5" \
  > "$work/one_host.log" 2>&1 || { cat "$work/one_host.log"; fail "resume on one host"; }
grep -q "resumed from .* at step 6 " "$work/one_host.log" || fail "the resume on one host did not start at step 6"
same_losses "$work/single/metrics.jsonl" "$work/one_host/metrics.jsonl" 7

# One slot per host: the tensor-parallel pair spans them. Warned, once; it still trains right.
on_hosts "host1 slots=1\nhost2 slots=1" 2 "$tessera" train $common --set train.max_steps=3 \
  --set parallel.tensor=2 --set output.dir="$work/spanning" > "$work/spanning.log" 2>&1 ||
  { cat "$work/spanning.log"; fail "tp=2 over two hosts"; }
[ "$(grep -c "tessera: warning: 1 of 1 tensor-parallel groups span hosts, the first with rank 0 on host1, rank 1 on host2: their all-reduces in every layer cross the network" "$work/spanning.log")" -eq 1 ] ||
  fail "no single warning of the tensor-parallel group spanning host1 and host2"
same_losses "$work/single/metrics.jsonl" "$work/spanning/metrics.jsonl" 1

# output.dir a folder of its own on host2 (bind-mounted there only): refused at the start.
mkdir -p "$work/unshared" "$work/host2_disk"
start=$(date +%s.%N)
status=0
TESSERA_HOSTS_PRIVATE="host2=$work/host2_disk:$work/unshared" on_hosts "$two_hosts" 4 "$tessera" train $common \
  --set train.max_steps=12 --set checkpoint.every=1 --set parallel.data=4 --set output.dir="$work/unshared" \
  > "$work/unshared.log" 2>&1 || status=$?
echo "output.dir not shared: the job ended with status $status after $(since "$start") s"
[ $status -ne 0 ] || fail "a run folder that host2 does not share was not refused"
[ "$(grep -c "output.dir '$work/unshared' is not one folder that every host shares: ranks 2-3 on host2 do not see the file rank 0 (on host1) wrote there" "$work/unshared.log")" -eq 1 ] ||
  { cat "$work/unshared.log"; fail "the error does not name host2's ranks once"; }
! grep -q "^step " "$work/unshared.log" || fail "a step was trained into a run folder that is not shared"
[ -z "$(ls -A "$work/host2_disk")" ] || fail "host2 wrote into its own folder: $(ls -A "$work/host2_disk")"
ls "$work/unshared" | grep -q 'checkpoint' && fail "a checkpoint was written: $(ls "$work/unshared")"
echo "PASS"
