#!/bin/sh
# Test hosts on one machine: N network namespaces host1..hostN, each with its own network stack,
# hostname and address, joined by a bridge, for multi-host tests of Open MPI (and Slurm) over TCP.
# Addresses come from the benchmarking range only: host K is 198.18.ID.K/24 and the machine itself
# (where mpirun runs) is 198.18.ID.254 on the bridge. Needs root and iproute2 (ip netns).
#
#   testhosts.sh up N         make host1..hostN (fails if they exist: run `down` first)
#   testhosts.sh down         remove them (whatever of them exists; never fails)
#   testhosts.sh check        exit 0 if namespaces can be made here, else print why and exit 1
#   testhosts.sh exec K CMD.. run CMD on host K (its network, hostname and /etc/hosts)
#   testhosts.sh kill K       SIGKILL every process on host K (a machine dying)
#   testhosts.sh cut K        take host K's link down (a network partition); `join K` brings it back
#   testhosts.sh hostfile N   print an Open MPI hostfile "hostK slots=S" (S: $SLOTS, default 2)
#   testhosts.sh mpirun-args  print the mpirun options that reach the hosts (agent, TCP, subnet)
#
# TESSERA_HOSTS_ID (0..127, default 0) picks the names and the subnet, so that several sets can exist
# at once. Inside a host, names resolve through /etc/netns/<namespace>/hosts (ip netns exec mounts it
# over /etc/hosts); the machine's own /etc/hosts is not changed.
set -eu
id=${TESSERA_HOSTS_ID:-0}
case $id in '' | *[!0-9]*) echo "testhosts: TESSERA_HOSTS_ID must be 0..127, got '$id'" >&2; exit 2 ;; esac
[ "$id" -le 127 ] || { echo "testhosts: TESSERA_HOSTS_ID must be 0..127, got $id" >&2; exit 2; }
subnet=198.18.$id
bridge=tsr${id}br
here=$(cd "$(dirname "$0")" && pwd)
ns() { echo "tsr$id-host$1"; }
# No IPv6 (its link-local addresses would come up by themselves): the hosts have 198.18.ID.K only.
no_ipv6() {  # no_ipv6 INTERFACE [NAMESPACE]
  f=/proc/sys/net/ipv6/conf/$1/disable_ipv6
  if [ -n "${2:-}" ]; then ip netns exec "$2" sh -c "[ ! -e $f ] || echo 1 > $f"; elif [ -e "$f" ]; then echo 1 > "$f"; fi
}
veth() { echo "tsr${id}v$1"; }

check() {
  [ "$(id -u)" -eq 0 ] || { echo "testhosts: not root (uid $(id -u)): network namespaces need root"; return 1; }
  command -v ip > /dev/null || { echo "testhosts: no 'ip' command (install iproute2)"; return 1; }
  command -v unshare > /dev/null || { echo "testhosts: no 'unshare' command (install util-linux)"; return 1; }
  probe="tsr$id-probe$$"
  err=$(ip netns add "$probe" 2>&1) || { echo "testhosts: cannot make a network namespace: $err"; return 1; }
  ip netns del "$probe"
  err=$(ip link add "tsr${id}probe" type bridge 2>&1) || { echo "testhosts: cannot make a bridge: $err"; return 1; }
  ip link del "tsr${id}probe"
}

up() {
  n=$1
  ip link add "$bridge" type bridge
  no_ipv6 "$bridge"
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  mkdir -p /etc/netns
  k=1
  while [ "$k" -le "$n" ]; do
    ip netns add "$(ns "$k")"
    ip link add "$(veth "$k")" type veth peer name eth0 netns "$(ns "$k")"
    no_ipv6 "$(veth "$k")"
    no_ipv6 eth0 "$(ns "$k")"
    ip link set "$(veth "$k")" master "$bridge" up
    ip -n "$(ns "$k")" link set lo up
    ip -n "$(ns "$k")" addr add "$subnet.$k/24" dev eth0
    ip -n "$(ns "$k")" link set eth0 up
    k=$((k + 1))
  done
  # Every host resolves every host's name (and the machine's, as "head").
  hosts=$(printf '127.0.0.1 localhost\n%s.254 head\n' "$subnet"; k=1; while [ "$k" -le "$n" ]; do echo "$subnet.$k host$k"; k=$((k + 1)); done)
  k=1
  while [ "$k" -le "$n" ]; do
    mkdir -p "/etc/netns/$(ns "$k")"
    echo "$hosts" > "/etc/netns/$(ns "$k")/hosts"
    k=$((k + 1))
  done
  echo "$n" > "/etc/netns/tsr$id.count"
}

down() {
  for path in /run/netns/tsr"$id"-host*; do
    [ -e "$path" ] || continue
    name=$(basename "$path")
    ip netns pids "$name" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns del "$name" 2> /dev/null || true
    rm -rf "/etc/netns/$name"
  done
  ip link del "$bridge" 2> /dev/null || true
  rm -f "/etc/netns/tsr$id.count"
  rmdir /etc/netns 2> /dev/null || true
}

# exec K CMD...: in host K's namespace, with its own hostname (a UTS namespace of its own).
exec_on() {
  k=$1 && shift
  exec ip netns exec "$(ns "$k")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$k" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  check) check ;;
  up) [ $# -eq 1 ] || { echo "usage: testhosts.sh up N" >&2; exit 2; }; check > /dev/null || { check; exit 1; }
      if ip link show "$bridge" > /dev/null 2>&1; then echo "testhosts: set $id exists already (testhosts.sh down first)" >&2; exit 1; fi
      trap 'down' EXIT; up "$1"; trap - EXIT ;;
  down) down ;;
  exec) exec_on "$@" ;;
  kill) ip netns pids "$(ns "$1")" | xargs -r kill -9 ;;
  cut) ip link set "$(veth "$1")" down ;;
  join) ip link set "$(veth "$1")" up ;;
  hostfile) k=1; while [ "$k" -le "$1" ]; do echo "host$k slots=${SLOTS:-2}"; k=$((k + 1)); done ;;
  mpirun-args)
    echo "--mca plm_rsh_agent $here/rsh_agent.sh --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self" \
         "--mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24 -x TESSERA_HOSTS_ID=$id" ;;
  *) sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
