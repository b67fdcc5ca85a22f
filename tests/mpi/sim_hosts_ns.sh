# Sourced by the multi-host tests (multihost_test.sh, elastic_test.sh): several machines
# simulated on this one. $FJIT_SIM_HOSTS (default 2) network + UTS namespaces are the hosts
# fjit-node1, fjit-node2, ...; each has an interface fjit0 with the address 10.231.0.K.
#   - Two hosts are joined directly by a veth pair.
#   - More hosts are joined through a bridge in a namespace of its own (the switch), one veth
#     pair a host.
# `$agent HOST COMMAND...` is an rsh agent (OpenMPI's plm_rsh_agent, fjit_launch's
# --rsh-agent) that runs COMMAND in HOST's namespaces. Like ssh across a split network, the
# agent cannot reach fjit-node2 while its link is down (link_down): it waits until the link is
# back (link_up) or its caller gives up.
#
# After sourcing: $work (a scratch directory, removed on exit with every process of every
# host), $nhosts, $node1 $node2 (the pids holding the first two hosts' namespaces), $agent,
# fail (counts failures in $failures), skip (exit 77), in_host HOST CMD... Exits 77 (skipped)
# when not root, or when namespaces or the veth pairs cannot be made.
set -uo pipefail
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for tool in unshare nsenter ip; do
  command -v "$tool" > /dev/null || skip "no $tool (util-linux, iproute2)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_multihost.XXXXXX")
holders=()
# Ends every process inside the simulated hosts (the namespaces' holders, OpenMPI's daemon,
# stopped ranks), so that the namespaces and the veth pair go with them.
cleanup() {
  local holder
  for holder in "${holders[@]}"; do
    for pid in $(pids_in_netns "$holder"); do kill -KILL "$pid" 2> /dev/null; done
    kill -KILL "$holder" 2> /dev/null
  done
  wait 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The pids (but the holder's own) in the network namespace held by pid $1.
pids_in_netns() {
  local ns pid
  ns=$(readlink "/proc/$1/ns/net" 2> /dev/null) || return 0
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$pid" != "$1" ] && [ "$(readlink "/proc/$pid/ns/net" 2> /dev/null)" = "$ns" ] && echo "$pid"
  done
}

# A simulated host: a process holding new network and UTS namespaces, named $1, lo up.
start_host() {
  unshare --net --uts sh -c "hostname $1 && ip link set lo up && exec sleep 3600" 2> "$work/$1.err" &
  local pid=$! i
  holders+=("$pid")
  for i in $(seq 50); do
    [ "$(nsenter -t "$pid" --uts hostname 2> /dev/null)" = "$1" ] && { echo "$pid" > "$work/$1.pid"; return 0; }
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  skip "cannot make network and UTS namespaces: $(cat "$work/$1.err")"
}
nhosts=${FJIT_SIM_HOSTS:-2}
for k in $(seq "$nhosts"); do start_host "fjit-node$k"; done
node1=$(cat "$work/fjit-node1.pid") node2=$(cat "$work/fjit-node2.pid")
# Host K's end of its link: fjit0, 10.231.0.K, up.
configure_end() {
  nsenter -t "$(cat "$work/fjit-node$1.pid")" --net sh -c "ip addr add 10.231.0.$1/24 dev fjit0 && ip link set fjit0 up" ||
    skip "cannot configure fjit-node$1's end of its link"
}
if [ "$nhosts" -eq 2 ]; then
  nsenter -t "$node1" --net ip link add fjit0 type veth peer name fjit0 netns "$node2" 2> "$work/veth.err" ||
    skip "cannot make a veth pair: $(cat "$work/veth.err")"
else
  start_host fjit-switch
  switch=$(cat "$work/fjit-switch.pid")
  nsenter -t "$switch" --net sh -c 'ip link add br0 type bridge && ip link set br0 up' 2> "$work/veth.err" ||
    skip "cannot make a bridge: $(cat "$work/veth.err")"
  for k in $(seq "$nhosts"); do
    nsenter -t "$switch" --net sh -c \
      "ip link add port$k type veth peer name fjit0 netns $(cat "$work/fjit-node$k.pid") &&
       ip link set port$k master br0 && ip link set port$k up" 2> "$work/veth.err" ||
      skip "cannot make fjit-node$k's veth pair: $(cat "$work/veth.err")"
  done
fi
for k in $(seq "$nhosts"); do configure_end "$k"; done

# The network split and its end: fjit-node2's end of the link down, and up again. fjit-node1's
# end stays configured (up, without a carrier), as a host's own interface does when the
# network beyond it fails, so that a job on fjit-node1 alone can still use it.
link_down() { nsenter -t "$node2" --net ip link set fjit0 down; }
link_up() { nsenter -t "$node2" --net ip link set fjit0 up; }
in_host() { local h=$1; shift; nsenter -t "$(cat "$work/$h.pid")" --net --uts "$@"; }

# OpenMPI's rsh agent: `agent [options] HOST COMMAND...` runs COMMAND in HOST's namespaces.
agent=$work/agent
cat > "$agent" << EOF
#!/bin/sh
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
[ -f "$work/\$host.pid" ] || { echo "agent: no simulated host \$host" >&2; exit 255; }
# No route to \$host while its link or fjit-node1's (where the callers run) is down: like ssh,
# keep trying until the caller gives up.
link_is_up() { nsenter -t "\$(cat "$work/\$1.pid")" --net ip link show fjit0 | grep -q 'state UP'; }
while [ "\$host" != fjit-node1 ] && ! { link_is_up fjit-node1 && link_is_up "\$host"; }; do
  sleep 0.2
done
exec nsenter -t "\$(cat "$work/\$host.pid")" --net --uts /bin/sh -c "\$*"
EOF
chmod +x "$agent"
mkdir -p "$work/ompi"
unset OMPI_MCA_btl OMPI_MCA_rmaps_base_oversubscribe
