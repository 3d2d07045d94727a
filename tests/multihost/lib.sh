# Sourced by the multi-host tests: test hosts made by launch/hosts/testhosts.sh (network namespaces
# on this machine), removed again on every exit; mpirun reaching them over TCP.
# Needs: $source (the source tree), $work (a scratch folder, emptied here), $TESSERA_HOSTS_ID (a set of its own
# per test, so that tests may run side by side).
# A machine where namespaces cannot be made skips the test: the reason printed, exit 77 (CTest's
# SKIP_RETURN_CODE), never a pass.
rm -rf "$work" && mkdir -p "$work"
testhosts="$source/launch/hosts/testhosts.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
hosts_up() {  # hosts_up N: host1..hostN, removed when the test exits however it exits
  if ! why=$(sh "$testhosts" check); then echo "SKIP: $why"; exit 77; fi
  sh "$testhosts" down  # a set left by a test killed with SIGKILL
  trap 'sh "$testhosts" down' EXIT
  trap 'exit 1' INT TERM HUP
  sh "$testhosts" up "$1" || fail "testhosts.sh up $1"
}
# on_hosts HOSTFILE_LINES NP ARGS...: mpirun over the test hosts named ("host1 slots=2\nhost2 slots=2"),
# ended after $MPIRUN_TIMEOUT s (300).
on_hosts() {
  printf "$1\n" > "$work/hostfile.$$"
  np=$2 && shift 2
  # Open MPI's mpirun, in this machine's namespace (the hosts' "head"), starts an orted on each host
  # through the agent; ranks talk TCP over the bridge only.
  timeout "${MPIRUN_TIMEOUT:-300}" mpirun -np "$np" --hostfile "$work/hostfile.$$" $(sh "$testhosts" mpirun-args) "$@"
}
# ranks_on K: how many tessera processes run on test host K.
ranks_on() {
  for pid in $(ip netns pids "tsr$TESSERA_HOSTS_ID-host$1"); do cat "/proc/$pid/comm" 2> /dev/null; done | grep -c '^tessera$' || true
}
signal_ranks() {  # signal_ranks SIGNAL K...: every tessera process on those hosts (as a scheduler does)
  sig=$1 && shift
  for k in "$@"; do
    for pid in $(ip netns pids "tsr$TESSERA_HOSTS_ID-host$k"); do
      [ "$(cat "/proc/$pid/comm" 2> /dev/null)" != tessera ] || kill -s "$sig" "$pid" 2> /dev/null || true
    done
  done
}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }  # seconds since $1 (date +%s.%N)
wait_for_file() {  # wait_for_file FILE SECONDS
  i=0
  until [ -e "$1" ]; do
    i=$((i + 1))
    [ $i -lt $(($2 * 10)) ] || fail "no $1 after $2 s"
    sleep 0.1
  done
}
. "$source/tests/e2e/same_losses.sh"
