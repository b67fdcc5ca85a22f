#!/usr/bin/env bash
# The main training job on several machines, simulated on this one (registered with CTest by
# tests/mpi/multihost_tests.cmake): HOSTS (2 or 4) network + UTS namespaces are the hosts
# fjit-node1, fjit-node2, ..., joined with private addresses (tests/mpi/sim_hosts_ns.sh);
# mpirun runs in fjit-node1 and starts the other hosts' daemons through an rsh agent that
# enters their namespaces (OpenMPI's plm_rsh_agent), and the ranks talk TCP (btl tcp,self).
#   - HOSTS hosts x 1 rank (and, on 2 hosts, x 2 ranks) train train_fashion_mnist on the
#     committed fixture: the final checkpoint holds the same state (SHA-256 of its tensors),
#     and every step's loss is equal, to the same job on one host (mpirun -np N here); the
#     multi-host job ran on every host and reduced by messages, the one-host job through its
#     shared-memory window (the metrics report);
#   - rank 3 of 4, on the last host, stopped (SIGSTOP) in the middle of training: every other
#     rank reports that it has not arrived, naming it and its host, and the job aborts within
#     the stall limits.
# Exits 77 (skipped) when not root, or when namespaces or the veth pairs cannot be made.
# usage: multihost_test.sh TRAIN_BINARY FIXTURE_DIR MPIRUN [HOSTS]
set -uo pipefail
bin=$1 fixture=$2 mpirun=$3
export FJIT_SIM_HOSTS=${4:-2}
. "$(dirname "$0")/sim_hosts_ns.sh"  # the hosts, $nhosts, $work, $agent, fail, skip
for slots in 1 2; do
  for k in $(seq "$nhosts"); do echo "fjit-node$k slots=$slots"; done > "$work/hosts$slots"
done
shapes="${nhosts}x1"
[ "$nhosts" -eq 2 ] && shapes="2x1 2x2"
export FJIT_INTRA_OP_THREADS=1  # the same on every rank of both jobs, whatever the placement
# mpirun on fjit-node1; the hostfile and the job follow.
multihost=(nsenter -t "$node1" --net --uts "$mpirun" --allow-run-as-root --bind-to none
  --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
  --mca orte_tmpdir_base "$work/ompi" --mca btl tcp,self
  --mca btl_tcp_if_include fjit0 --mca oob_tcp_if_include fjit0 --display-map)
onehost=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none)

data=$work/data
. "$(dirname "$0")/../../examples/fixture_data.sh"
. "$(dirname "$0")/../../examples/checkpoint_state.sh"
fixture_data "$fixture" "$data"
job=(--data-dir "$data" --epochs 3 --batch-size 8 --log-every 1 --seed 5 --checks all)
# The loss of every step, without the timings.
losses() { grep -o '^epoch .* | loss [0-9.]*' "$1"; }
path_line() { grep -o 'allreduce among MPI ranks: .*' "$1"; }

for shape in $shapes; do
  per_host=${shape#*x}
  np=$((nhosts * per_host))
  one=$work/one-$shape two=$work/two-$shape
  timeout 120 "${onehost[@]}" -np "$np" "$bin" "${job[@]}" --checkpoint-dir "$one" > "$one.out" 2>&1 ||
    { rc=$?; cat "$one.out"; fail "$shape: the one-host job exited $rc"; continue; }
  timeout 120 "${multihost[@]}" --hostfile "$work/hosts$per_host" -np "$np" "$bin" "${job[@]}" \
    --checkpoint-dir "$two" > "$two.out" 2>&1 ||
    { rc=$?; cat "$two.out"; fail "$shape: the multi-host job exited $rc"; continue; }
  for k in $(seq "$nhosts"); do
    grep -Eq "Data for node: fjit-node$k[[:space:]].*Num procs: $per_host\$" "$two.out" ||
      fail "$shape: mpirun did not place $per_host rank(s) on fjit-node$k"
  done
  [ "$(losses "$two.out" | wc -l)" -eq 6 ] || fail "$shape: the multi-host job printed no 6 step lines"
  diff <(losses "$one.out") <(losses "$two.out") || fail "$shape: the step losses differ from one host's"
  same_state "$one/ckpt-6.safetensors" "$two/ckpt-6.safetensors" ||
    fail "$shape: the final checkpoint differs from one host's"
  path_line "$two.out" | grep -q 'shared_window=0 messages=[1-9]' ||
    fail "$shape: the multi-host job did not reduce by messages: $(path_line "$two.out")"
  path_line "$one.out" | grep -q 'shared_window=[1-9]' ||
    fail "$shape: the one-host job did not reduce through its window: $(path_line "$one.out")"
  echo "$shape: $(path_line "$two.out") (one host: $(path_line "$one.out" | sed 's/.*: //'))"
done

# Rank 3 of 4 (on the last host) stopped while the job trains: the others warn after 1 s
# and abort after 3 s, each naming it and its host.
last=fjit-node$nhosts
long=(--data-dir "$data" --epochs 100000 --batch-size 8 --log-every 1 --seed 5)
out=$work/stall.out
start=$(date +%s)
FJIT_STALL_WARN_S=1 FJIT_STALL_ABORT_S=3 timeout 90 "${multihost[@]}" --hostfile "$work/hosts$((4 / nhosts))" \
  -np 4 "$bin" "${long[@]}" > "$out" 2>&1 &
job_pid=$!
rank3=
for i in $(seq 300); do
  if grep -q '^epoch .* step *20/' "$out"; then
    ns=$(readlink "/proc/$(cat "$work/$last.pid")/ns/net")
    for pid in $(pgrep -f -- "$bin"); do
      [ "$(readlink "/proc/$pid/ns/net" 2> /dev/null)" = "$ns" ] &&
        tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=3' && rank3=$pid
    done
    # (On a loaded machine a look can miss it: look again until the loop's time is up.)
    [ -n "$rank3" ] && break
  fi
  kill -0 "$job_pid" 2> /dev/null || break
  sleep 0.1
done
if [ -z "$rank3" ]; then
  cat "$out"
  fail "the long job did not start training with a rank 3 on $last"
else
  kill -STOP "$rank3"
  stopped=$(date +%s)
  wait "$job_pid"
  rc=$?
  took=$(($(date +%s) - stopped))
  echo "stopped rank 3 (pid $rank3) on $last after $((stopped - start)) s; the job exited $rc after $took s more"
  grep -E 'stall|aborting' "$out"
  [ "$rc" -ne 0 ] || fail "the job exited 0 with a stopped rank"
  [ "$rc" -ne 124 ] || fail "the job did not abort by itself"
  [ "$took" -le 20 ] || fail "the job took $took s to abort (stall limits 1 s and 3 s)"
  for rank in 0 1 2; do
    grep -q "stall: rank $rank of 4 (mpi, on fjit-node[1-4]) has waited [0-9.]* s in .*; not arrived: rank 3 (on $last); waiting in it: " "$out" ||
      fail "rank $rank's warning does not name rank 3 on $last"
  done
  grep -q "aborting the job (rank [012] of 4, mpi): stall: rank [012] (on fjit-node[1-4]) waited .* (abort_after 3000 ms); not arrived: rank 3 (on $last)" "$out" ||
    fail "the abort does not name rank 3 on $last"
fi

[ "$failures" -eq 0 ] && echo "multihost_test: OK"
exit $((failures > 0))
