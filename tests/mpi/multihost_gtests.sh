#!/usr/bin/env bash
# Every MPI test program (tests/mpi/*_mpi_test.cc) on HOSTS simulated hosts, one rank a host
# (tests/mpi/sim_hosts_ns.sh): the same assertions as under mpiexec on one host, with the
# ranks on different hosts, talking TCP. Registered with CTest by
# tests/mpi/multihost_tests.cmake. Exits 77 (skipped) where namespaces cannot be made.
# usage: multihost_gtests.sh MPIRUN HOSTS TEST_BINARY...
set -uo pipefail
mpirun=$1
export FJIT_SIM_HOSTS=$2
shift 2
. "$(dirname "$0")/sim_hosts_ns.sh"  # the hosts, $nhosts, $work, $agent, fail, skip
for k in $(seq "$nhosts"); do echo "fjit-node$k slots=1"; done > "$work/hosts"
export FJIT_INTRA_OP_THREADS=1
multihost=(nsenter -t "$node1" --net --uts "$mpirun" --allow-run-as-root --bind-to none
  --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
  --mca orte_tmpdir_base "$work/ompi" --mca btl tcp,self
  --mca btl_tcp_if_include fjit0 --mca oob_tcp_if_include fjit0
  --hostfile "$work/hosts" -np "$nhosts")
for test in "$@"; do
  out=$work/$(basename "$test").out
  start=$(date +%s)
  if timeout 170 "${multihost[@]}" "$test" > "$out" 2>&1; then
    echo "$(basename "$test") on $nhosts hosts: $(grep -ao '\[  PASSED  \] .*' "$out" | head -1) ($(($(date +%s) - start)) s)"
  else
    cat "$out"
    fail "$(basename "$test") failed on $nhosts hosts"
  fi
done
[ "$failures" -eq 0 ] && echo "multihost_gtests: OK"
exit $((failures > 0))
