#!/bin/sh
# A two-node Slurm test cluster on the test hosts of launch/hosts/testhosts.sh (which must be up,
# with the same TESSERA_HOSTS_ID): slurmctld and a slurmd on host1, a slurmd on host2, one munged
# for both (the hosts share this machine's file system, so its socket too). Debian's packages
# slurmctld, slurmd and munge (launch/setup.sh slurm installs them). Everything of the cluster is
# under DIR: its slurm.conf, state, spool folders and logs.
#
#   testcluster.sh up DIR     start it (prints the SLURM_CONF to export)
#   testcluster.sh down DIR   stop its daemons (those whose pid files are in DIR)
set -eu
id=${TESSERA_HOSTS_ID:-0}
here=$(cd "$(dirname "$0")" && pwd)
testhosts="$here/../hosts/testhosts.sh"
cmd=${1:-} dir=${2:-}
[ -n "$dir" ] || { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }

write_config() {
  mkdir -p "$dir/state" "$dir/host1" "$dir/host2" "$dir/munge"
  cpus=$(nproc)
  cat > "$dir/slurm.conf" << CONF
ClusterName=tessera-test
SlurmctldHost=host1(198.18.$id.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
InactiveLimit=0
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=host1 NodeAddr=198.18.$id.1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
NodeName=host2 NodeAddr=198.18.$id.2 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=host1,host2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
CONF
  : "$cpus"
  # slurmd 22.05 starts a cgroup plugin whatever the proctrack and task plugins: v1, on the
  # hierarchies mounted for it in its own mount namespace (slurmd_on below).
  echo "CgroupPlugin=cgroup/v1" > "$dir/cgroup.conf"
}

# slurmd_on K: slurmd on host K, with cgroup v1 hierarchies of its own mounted, and a /tmp of its
# own (Slurm's PMIx plugin makes folders there named by job and step only, as on separate
# machines). Only it and its jobs see those: ip netns exec gave it a mount namespace of its own.
slurmd_on() {
  mkdir -p "$dir/host$1/tmp" && chmod 1777 "$dir/host$1/tmp"
  sh "$testhosts" exec "$1" sh -c '
    mount --bind "${0%/slurm.conf}/$1/tmp" /tmp || exit 1
    mount -t tmpfs cgroup_root /sys/fs/cgroup || exit 1
    for c in cpuset cpu cpuacct memory freezer devices pids; do
      mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1
    done
    exec slurmd -f "$0" -N "$1"' "$dir/slurm.conf" "host$1"
}

up() {
  for p in slurmctld slurmd munged; do command -v $p > /dev/null || { echo "testcluster: no $p (launch/setup.sh slurm)"; exit 1; }; done
  [ -e "/run/netns/tsr$id-host2" ] || { echo "testcluster: no test hosts $id (testhosts.sh up 2 first)"; exit 1; }
  case $(cd "$dir" && pwd -P)/ in /tmp/*) echo "testcluster: DIR must not be under /tmp (each host gets a /tmp of its own)"; exit 1 ;; esac
  write_config
  # munged: its own socket and key copy under DIR, as the munge user it insists on.
  chown munge "$dir/munge" && chmod 711 "$dir/munge"
  runuser -u munge -- munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" --key-file=/etc/munge/munge.key
  export SLURM_CONF="$dir/slurm.conf"
  sh "$testhosts" exec 1 slurmctld -f "$dir/slurm.conf"
  for k in 1 2; do slurmd_on $k; done
  echo "export SLURM_CONF=$dir/slurm.conf"
}

down() {
  for pidfile in "$dir"/slurmd.*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -e "$pidfile" ] && kill "$(cat "$pidfile")" 2> /dev/null || true
  done
}

case $cmd in
  up) up ;;
  down) down ;;
  *) sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
