#!/bin/sh
# Open MPI's rsh launcher agent for the test hosts of testhosts.sh (--mca plm_rsh_agent THIS): called
# as ssh would be, `rsh_agent.sh HOST COMMAND...`, it runs COMMAND (the orted command line, which ssh
# hands to a shell) on test host HOST ("hostK" or its address 198.18.ID.K).
# TESSERA_HOSTS_PRIVATE="hostK=PRIVATE:DIR" gives host K its own folder PRIVATE over DIR (a mount
# namespace of its own, as a node-local disk would), for the tests of a run folder that is not shared.
set -eu
id=${TESSERA_HOSTS_ID:-0}
host=$1 && shift
case $host in
  host[0-9]*) k=${host#host} ;;
  198.18.$id.*) k=${host##*.} ;;
  *) echo "rsh_agent: '$host' is no test host (host1.. or 198.18.$id.K)" >&2; exit 255 ;;
esac
[ -e "/run/netns/tsr$id-host$k" ] || { echo "rsh_agent: test host $host does not exist (testhosts.sh up N)" >&2; exit 255; }
private=
case ${TESSERA_HOSTS_PRIVATE:-} in "host$k="*) private=${TESSERA_HOSTS_PRIVATE#host$k=} ;; esac
# ip netns exec gives the command a mount namespace of its own, so the bind mount stays on this host.
exec ip netns exec "tsr$id-host$k" unshare --uts sh -c '
  hostname "$0"
  if [ -n "$1" ]; then mount --bind "${1%%:*}" "${1#*:}" || exit 255; fi
  shift
  exec sh -c "$*"' "host$k" "$private" "$@"
