#!/usr/bin/env bash
# fjit_launch (parallel/launch/launcher.h) on two simulated hosts (tests/mpi/sim_hosts_ns.sh;
# registered with CTest by tests/mpi/multihost_tests.cmake). The job, 1 rank on each of
# fjit-node1 and fjit-node2, checkpoints every 100 steps; fjit_launch runs in fjit-node1.
#   kill   every process of fjit-node2 (OpenMPI's daemon, its rank) is killed mid-run: the
#          launcher drops fjit-node2, ends what is left, and the job finishes on fjit-node1
#          alone, resumed at 1 replica from the latest checkpoint;
#   split  fjit-node2's end of the veth link goes down mid-run: the ranks' stall limits abort fjit-node1's side,
#          the launcher ends mpirun (which would wait for ever on fjit-node2's daemon), finds
#          fjit-node2 out of reach, and the job finishes on fjit-node1; the link comes back
#          while it runs, and the launcher then ends the old job's daemon and rank there.
# Either way the job exits 0 within a bound, its final checkpoint holds the same state
# (checkpoint_state.sh same_state) as a reference: the checkpoint the launcher resumed from,
# resumed on one host by plain mpirun -np 1; and nothing of the job is left on either host.
# Exits 77 (skipped) when namespaces cannot be made.
# usage: elastic_test.sh kill|split TRAIN_BINARY FIXTURE_DIR MPIRUN FJIT_LAUNCH
set -uo pipefail
mode=$1 bin=$2 fixture=$3 mpirun=$4 launch=$5
. "$(dirname "$0")/sim_hosts_ns.sh"  # the hosts, $work, $agent, link_down, link_up, fail, skip
. "$(dirname "$0")/../../examples/fixture_data.sh"
. "$(dirname "$0")/../../examples/checkpoint_state.sh"
export FJIT_INTRA_OP_THREADS=1
data=$work/data
fixture_data "$fixture" "$data"
epochs=2000  # 2 steps an epoch on the 16-example fixture
job=(--data-dir "$data" --epochs $epochs --batch-size 8 --layers 784,32,10 --log-every 1 --seed 5
  --checkpoint-every 100)
final=$((2 * epochs))
mpi_args=(--allow-run-as-root --bind-to none --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self
  --mca btl_tcp_if_include fjit0 --mca oob_tcp_if_include fjit0
  -x FJIT_STALL_WARN_S=1 -x FJIT_STALL_ABORT_S=3)
launcher=("$launch" --hosts fjit-node1:1,fjit-node2:1 --mpirun "$mpirun" --rsh-agent "$agent"
  --tmpdir "$work/ompi" --max-restarts 2 --probe-timeout 5 --abort-grace 10)
for a in "${mpi_args[@]}"; do launcher+=(--mpirun-arg "$a"); done
ck=$work/ck out=$work/launch.out
in_host fjit-node1 "${launcher[@]}" -- "$bin" "${job[@]}" --checkpoint-dir "$ck" > "$out" 2>&1 &
job_pid=$!
started=0
for i in $(seq 600); do
  [ -e "$ck/ckpt-200.safetensors" ] && { started=1; break; }  # mid-run, with checkpoints
  kill -0 "$job_pid" 2> /dev/null || break
  sleep 0.1
done
if [ "$started" -eq 0 ]; then
  cat "$out"
  fail "the job did not reach its checkpoint at step 200 on two hosts"
  exit 1
fi
t0=$(date +%s)
if [ "$mode" = kill ]; then
  for pid in $(pids_in_netns "$node2"); do kill -KILL "$pid" 2> /dev/null; done
  echo "killed every process of fjit-node2"
else
  link_down
  echo "the link between fjit-node1 and fjit-node2 is down"
  # Back once the launcher has restarted the job on fjit-node1.
  for i in $(seq 900); do grep -q '^fjit_launch: restart 1 of' "$out" && break; sleep 0.1; done
  link_up
  echo "the link is up again after $(($(date +%s) - t0)) s"
fi
wait "$job_pid"
rc=$?
took=$(($(date +%s) - t0))
grep '^fjit_launch' "$out"
echo "fjit_launch exited $rc, $took s after the failure"
[ "$rc" -eq 0 ] || { tail -40 "$out"; fail "fjit_launch exited $rc"; }
[ "$took" -le 120 ] || fail "the job took $took s after the failure to finish (bound 120 s)"
grep -q '^fjit_launch: dropping fjit-node2: ' "$out" || fail "the launcher did not drop fjit-node2"
grep -q '^fjit_launch: dropping fjit-node1' "$out" && fail "the launcher dropped fjit-node1"
[ "$(grep -c '^fjit_launch: attempt [0-9]* of at most' "$out")" -eq 2 ] || fail "not exactly two attempts"
grep -q '^fjit_launch: attempt 2 of at most 3: 1 rank(s) on fjit-node1 (1 slot)' "$out" ||
  fail "the second attempt did not run 1 rank on fjit-node1"
from=$(grep -o 'resuming from [^ ]*ckpt-[0-9]*.safetensors' "$out" | tail -1 | sed 's/resuming from //')
[ -n "$from" ] || fail "the launcher resumed from no checkpoint"
grep -q "resumed from $from" "$out" || fail "the trainer did not resume from $from"
[ "$mode" = kill ] || grep -q '^fjit_launch: fjit-node2 answers again: ended what was left' "$out" ||
  fail "the launcher did not end the old job on fjit-node2 once the link was back"
ls "$ck" | grep -v '^ckpt-[0-9]*\.safetensors$' && fail "stray files in the checkpoint directory"
for node in "$node1" "$node2"; do
  for pid in $(pids_in_netns "$node"); do
    fail "left running: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null)"
  done
done
# The reference: the same checkpoint resumed on one host.
if [ -n "$from" ]; then
  mkdir -p "$work/ref"
  cp "$from" "$work/ref/"
  "$mpirun" --allow-run-as-root --bind-to none -np 1 "$bin" "${job[@]}" --checkpoint-dir "$work/ref" \
    --resume > "$work/ref.out" 2>&1 || { cat "$work/ref.out"; fail "the reference run exited $?"; }
  same_state "$ck/ckpt-$final.safetensors" "$work/ref/ckpt-$final.safetensors" ||
    fail "the final checkpoint differs from the reference's (resumed on one host from $from)"
fi
[ -n "${ELASTIC_TEST_KEEP:-}" ] && cp "$out" "$ELASTIC_TEST_KEEP"
[ "$failures" -eq 0 ] && echo "elastic_test $mode: OK"
exit $((failures > 0))
