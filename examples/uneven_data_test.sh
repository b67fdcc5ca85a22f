#!/usr/bin/env bash
# train_fashion_mnist under `MPIEXEC -n NP` with ranks that hold unequal data
# (--examples-per-process; registered with CTest by examples/CMakeLists.txt), on the committed
# 16-example fixture. A rank left waiting for one that stopped would end the job with the
# stall abort, set to 20 s here; the test wants exit 0 well before that.
#   np 2  parts 16,0: rank 1 has no data and joins every step with zero rows. Each step is then
#         rank 0's 4 rows alone, so the epoch lines equal, to the last digit, one replica
#         trained with a batch of 4 over the same 16 examples in the same order.
#   np 3  parts 9,2,5 in local batches of 2 (4, 1 and 2 batches an epoch): the ranks run out
#         at different steps; the job ends normally after 3 epochs of 4 steps, with finite
#         losses (tests/mpi/join_mpi_test.cc checks such a run against one replica).
# usage: uneven_data_test.sh NP TRAIN_BINARY FIXTURE_DIR MPIEXEC FLAGS...
set -uo pipefail
np=$1 bin=$2 fixture=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_uneven_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
. "$(dirname "$0")/fixture_data.sh"
fixture_data "$fixture" "$work/data"
# One intra-op thread everywhere: the runs compared compute each product the same way.
export FJIT_STALL_ABORT_S=20 FJIT_INTRA_OP_THREADS=1
small=(--data-dir "$work/data" --epochs 3 --log-every 0 --seed 5)
epoch_lines() { grep '^== epoch' "$1" | sed -e 's/ (eval.*//'; }

if [ "$np" = 2 ]; then
  parts=16,0
  "$@" -n 2 "$bin" "${small[@]}" --batch-size 8 --examples-per-process $parts > "$work/mpi.out" 2>&1 ||
    { rc=$?; cat "$work/mpi.out"; fail "the MPI run exited $rc"; }
  "$bin" "${small[@]}" --batch-size 4 > "$work/one.out" 2>&1 || { rc=$?; cat "$work/one.out"; fail "the one-replica run exited $rc"; }
  diff <(epoch_lines "$work/one.out") <(epoch_lines "$work/mpi.out") ||
    fail "rank 0's data alone, with rank 1 joined, trained differently from one replica over it"
  steps=12
else
  parts=9,2,5
  "$@" -n 3 "$bin" "${small[@]}" --batch-size 6 --examples-per-process $parts > "$work/mpi.out" 2>&1 ||
    { rc=$?; cat "$work/mpi.out"; fail "the MPI run exited $rc"; }
  steps=12
fi
grep -q "examples per process $parts" "$work/mpi.out" || fail "the run does not say how its data is split"
[ "$(epoch_lines "$work/mpi.out" | wc -l)" -eq 3 ] || { cat "$work/mpi.out"; fail "expected 3 epoch lines"; }
grep -q "^trained $steps steps" "$work/mpi.out" || fail "expected $steps steps"
grep -q '^final test accuracy: [0-9.]*%$' "$work/mpi.out" || fail "no final test accuracy line"
grep -qiw 'nan\|stalled' "$work/mpi.out" && fail "a NaN or a stall in the output"
[ "$failures" -eq 0 ] && echo "uneven_data_test np $np: OK"
exit $((failures > 0))
